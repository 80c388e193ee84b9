// SPDX-License-Identifier: GPL-2.0
/* User side of the duplicator (duplicate.bpf.c): load through the generated
 * skeleton, attach at clsact egress inside a network namespace (tchook.c),
 * and keep the per-destination probabilities in its map.  Nothing is pinned,
 * as for the counters (loader.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "internal.h"
#include "duplicator.h"
#include "duplicate.skel.h"

struct cx_dup {
	struct cx_duplicate_bpf *skel;
	struct cx_filter filter;
	int map_fd;
};

static int cx_dup_load(struct cx_dup *dup, __u32 max_entries)
{
	int err;

	dup->skel = cx_duplicate_bpf__open();
	if (!dup->skel)
		return cx_fail(CX_STAGE_LOAD, errno, __func__, "open BPF object");
	err = bpf_map__set_max_entries(dup->skel->maps.cx_dup_ratio, max_entries);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "max_entries %u", max_entries);
	err = cx_duplicate_bpf__load(dup->skel);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "load and verify duplicate.bpf.o");
	dup->map_fd = bpf_map__fd(dup->skel->maps.cx_dup_ratio);
	return 0;
}

struct cx_dup *cx_dup_attach(const char *ifname, const char *netns, __u32 max_entries, __u32 priority)
{
	struct cx_dup *dup;
	int saved = -1;

	cx_error_reset();
	if (!max_entries || priority > 0xFFFF) {
		cx_fail(CX_STAGE_ARG, EINVAL, __func__, "max_entries %u, priority %u (at most 65535)",
			max_entries, priority);
		return NULL;
	}
	dup = calloc(1, sizeof(*dup));
	if (!dup) {
		cx_fail(CX_STAGE_ARG, errno, __func__, "calloc");
		return NULL;
	}
	dup->map_fd = -1;
	if (cx_filter_init(&dup->filter, ifname, netns) || cx_netns_enter(dup->filter.netns, &saved))
		goto cleanup;
	if (cx_dup_load(dup, max_entries) ||
	    cx_filter_attach_here(&dup->filter, bpf_program__fd(dup->skel->progs.cx_dup_egress), priority)) {
		cx_netns_leave(saved);
		goto cleanup;
	}
	if (cx_netns_leave(saved))
		goto cleanup;
	return dup;
cleanup:
	cx_dup_free(dup);
	return NULL;
}

int cx_dup_set(struct cx_dup *dup, __u32 daddr_be, __u32 ratio)
{
	cx_libbpf_msg[0] = '\0';
	if (!dup || dup->map_fd < 0)
		return cx_fail(CX_STAGE_ARG, EINVAL, __func__, "not attached");
	if (!ratio) {
		if (bpf_map_delete_elem(dup->map_fd, &daddr_be) && errno != ENOENT)
			return cx_fail(CX_STAGE_UPDATE, errno, __func__, "delete %08x", daddr_be);
		return 0;
	}
	if (bpf_map_update_elem(dup->map_fd, &daddr_be, &ratio, BPF_ANY))
		return cx_fail(CX_STAGE_UPDATE, errno, __func__, "set %08x to %u", daddr_be, ratio);
	return 0;
}

int cx_dup_detach(struct cx_dup *dup)
{
	return dup ? cx_filter_detach(&dup->filter) : 0;
}

void cx_dup_free(struct cx_dup *dup)
{
	if (!dup)
		return;
	cx_dup_detach(dup);
	cx_duplicate_bpf__destroy(dup->skel);
	free(dup);
}

int cx_dup_filter(const struct cx_dup *dup, __u32 *handle, __u32 *priority, __u32 *prog_id)
{
	if (!dup)
		return cx_fail(CX_STAGE_ARG, ENOENT, __func__, "no duplicator");
	return cx_filter_id(&dup->filter, handle, priority, prog_id);
}
