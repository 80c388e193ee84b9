// SPDX-License-Identifier: GPL-2.0
/* Shared inside libcxcounters: the tc filter plumbing (tchook.c), the
 * counters' loader (loader.c) and reader (reader.c), the duplicator
 * (duplicator.c); not part of the library's interface (loader.h,
 * duplicator.h). */
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

/* One tc filter of ours at clsact egress of ifname inside netns. */
struct cx_filter {
	char ifname[IF_NAMESIZE];
	char netns[PATH_MAX];		/* "" means the caller's namespace */
	struct bpf_tc_hook hook;
	struct bpf_tc_opts opts;
	bool hook_created;		/* only then is the clsact ours to remove */
	bool attached;
};

struct cx_counters {
	struct cx_counters_bpf *skel;
	struct cx_filter filter;
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
/* Clear the thread's last error and route libbpf's messages to it. */
CX_HIDDEN void cx_error_reset(void);

/* Check and copy the names; nothing touches the kernel. */
CX_HIDDEN int cx_filter_init(struct cx_filter *f, const char *ifname, const char *netns);
/* Move this thread into netns ("" stays); *saved gets our own namespace. */
CX_HIDDEN int cx_netns_enter(const char *netns, int *saved);
/* Return to the namespace saved by cx_netns_enter; failing here would leave
 * the caller's thread in the instance's namespace, so it is reported. */
CX_HIDDEN int cx_netns_leave(int saved);
/* Inside the namespace already: create clsact if absent (remembering that
 * we did) and add the program as a filter at `priority` (0: the kernel
 * picks, ahead of the filters already there). */
CX_HIDDEN int cx_filter_attach_here(struct cx_filter *f, int prog_fd, __u32 priority);
/* Remove our filter, and our clsact if we made it and it is empty now; safe
 * to call again and after the interface or namespace is gone. */
CX_HIDDEN int cx_filter_detach(struct cx_filter *f);
CX_HIDDEN int cx_filter_id(const struct cx_filter *f, __u32 *handle, __u32 *priority, __u32 *prog_id);

#endif
