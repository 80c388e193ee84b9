// SPDX-License-Identifier: GPL-2.0
/* Shared between the loader (load, attach, detach: loader.c) and the reader
 * (per-CPU sums, batch or iterated map reads: reader.c); not part of the
 * library's interface (loader.h). */
#ifndef CX_INTERNAL_H
#define CX_INTERNAL_H

#include <limits.h>
#include <net/if.h>
#include <stdbool.h>
#include <bpf/libbpf.h>
#include "loader.h"
#include "counters.skel.h"

/* bpf_map_lookup_batch lays per-CPU values out at 8-byte strides. */
#define CX_PCPU_STRIDE ((sizeof(struct cx_value) + 7) & ~(size_t)7)

struct cx_counters {
	struct cx_counters_bpf *skel;
	char ifname[IF_NAMESIZE];
	char netns[PATH_MAX];		/* "" means the caller's namespace */
	struct bpf_tc_hook hook;
	struct bpf_tc_opts opts;
	bool hook_created;		/* only then is the clsact ours to remove */
	bool attached;
	bool use_batch;
	__u32 capacity;
	int ncpus;
	__u32 *keys;			/* read scratch, capacity keys */
	void *pcpu;			/* read scratch, capacity x ncpus values */
};

#define CX_HIDDEN __attribute__((visibility("hidden")))

/* Record "function: what (value): strerror" as the thread's last error; -1. */
CX_HIDDEN int cx_fail(int stage, int err, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* libbpf's last warning, folded into the next error message. */
CX_HIDDEN extern __thread char cx_libbpf_msg[256];

#endif
