// SPDX-License-Identifier: GPL-2.0
/* User side of the per-destination counters: loads counters.bpf.o through its
 * generated skeleton, attaches it at clsact egress inside a network namespace,
 * sums the per-CPU values on read, and removes exactly what it added.
 * Nothing is pinned: the tc filter holds the program and this process holds
 * the map, so no bpffs is needed (`ip netns exec` remounts /sys) and nothing
 * outlives the interface if the process dies. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "internal.h"

static __thread char cx_err[1024];
static __thread int cx_err_no;
static __thread int cx_err_stage;
__thread char cx_libbpf_msg[256];

const char *cx_last_error(void) { return cx_err; }
int cx_last_errno(void) { return cx_err_no; }
int cx_last_stage(void) { return cx_err_stage; }

/* Record "function: what (value): strerror" and return -1 for tail calls. */
int cx_fail(int stage, int err, const char *func, const char *fmt, ...)
{
	char what[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	cx_err_no = err < 0 ? -err : err;
	cx_err_stage = stage;
	snprintf(cx_err, sizeof(cx_err), "%s: %s: %s%s%s", func, what,
		 strerror(cx_err_no), cx_libbpf_msg[0] ? "; libbpf: " : "",
		 cx_libbpf_msg);
	return -1;
}

/* Keep libbpf's last warning for the error message instead of stderr noise;
 * COLLAPSAR_BPF_DEBUG=1 shows everything (verifier log included). */
static int cx_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	size_t n;

	if (getenv("COLLAPSAR_BPF_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	if (level != LIBBPF_WARN)
		return 0;
	vsnprintf(cx_libbpf_msg, sizeof(cx_libbpf_msg), fmt, ap);
	/* libbpf prefixes most messages itself; ours adds "libbpf: " already. */
	if (!strncmp(cx_libbpf_msg, "libbpf: ", 8))
		memmove(cx_libbpf_msg, cx_libbpf_msg + 8, strlen(cx_libbpf_msg + 8) + 1);
	n = strlen(cx_libbpf_msg);
	if (n && cx_libbpf_msg[n - 1] == '\n')
		cx_libbpf_msg[n - 1] = '\0';
	return 0;
}

void cx_error_reset(void)
{
	cx_err[0] = cx_libbpf_msg[0] = '\0';
	cx_err_no = cx_err_stage = 0;
	libbpf_set_print(cx_libbpf_print);
}

static int cx_load(struct cx_counters *cx, __u32 max_entries, __u32 overhead)
{
	int err;

	cx->skel = cx_counters_bpf__open();
	if (!cx->skel)
		return cx_fail(CX_STAGE_LOAD, errno, __func__, "open BPF object");
	cx->skel->rodata->wire_overhead_bytes = overhead;
	err = bpf_map__set_max_entries(cx->skel->maps.cx_dest, max_entries);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "max_entries %u", max_entries);
	err = cx_counters_bpf__load(cx->skel);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "load and verify counters.bpf.o");
	return 0;
}

struct cx_counters *cx_counters_attach(const char *ifname, const char *netns,
				       __u32 max_entries, __u32 wire_overhead_bytes)
{
	struct cx_counters *cx;
	int saved = -1;

	cx_error_reset();
	if (!max_entries) {
		cx_fail(CX_STAGE_ARG, EINVAL, __func__, "max_entries %u", max_entries);
		return NULL;
	}
	cx = calloc(1, sizeof(*cx));
	if (!cx) {
		cx_fail(CX_STAGE_ARG, errno, __func__, "calloc");
		return NULL;
	}
	if (cx_filter_init(&cx->filter, ifname, netns))
		goto cleanup;
	cx->capacity = max_entries;
	cx->use_batch = true;
	cx->ncpus = libbpf_num_possible_cpus();
	if (cx->ncpus <= 0) {
		cx_fail(CX_STAGE_LOAD, cx->ncpus, __func__, "count possible CPUs");
		goto cleanup;
	}
	cx->keys = calloc(max_entries, sizeof(*cx->keys));
	cx->pcpu = calloc((size_t)max_entries * cx->ncpus, CX_PCPU_STRIDE);
	if (!cx->keys || !cx->pcpu) {
		cx_fail(CX_STAGE_ARG, ENOMEM, __func__, "buffers for %u entries", max_entries);
		goto cleanup;
	}
	/* Namespace first: a missing one is the likeliest mistake, and cheap. */
	if (cx_netns_enter(cx->filter.netns, &saved))
		goto cleanup;
	/* Priority 0: the kernel puts us ahead of the filters already there. */
	if (cx_load(cx, max_entries, wire_overhead_bytes) ||
	    cx_filter_attach_here(&cx->filter, bpf_program__fd(cx->skel->progs.cx_count_egress), 0)) {
		cx_netns_leave(saved);
		goto cleanup;
	}
	if (cx_netns_leave(saved))
		goto cleanup;
	return cx;
cleanup:
	cx_counters_free(cx);
	return NULL;
}

int cx_counters_detach(struct cx_counters *cx)
{
	return cx ? cx_filter_detach(&cx->filter) : 0;
}

void cx_counters_free(struct cx_counters *cx)
{
	if (!cx)
		return;
	cx_counters_detach(cx);
	cx_counters_bpf__destroy(cx->skel);
	free(cx->pcpu);
	free(cx->keys);
	free(cx);
}
