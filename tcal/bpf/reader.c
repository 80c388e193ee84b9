// SPDX-License-Identifier: GPL-2.0
/* Reading the per-destination counters: the whole map in one batch syscall
 * where the kernel has batch ops for per-CPU hash maps, key by key
 * otherwise, then the per-CPU values summed into one entry per destination. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <bpf/bpf.h>
#include "internal.h"

/* Sum the per-CPU values of key i of the scratch buffer into out. */
static void cx_sum(const struct cx_counters *cx, __u32 i, struct cx_entry *out)
{
	const char *base = (const char *)cx->pcpu + (size_t)i * cx->ncpus * CX_PCPU_STRIDE;
	int cpu;

	out->daddr_be = cx->keys[i];
	out->pad = 0;
	memset(&out->value, 0, sizeof(out->value));
	for (cpu = 0; cpu < cx->ncpus; cpu++) {
		const struct cx_value *v = (const void *)(base + cpu * CX_PCPU_STRIDE);

		out->value.bytes += v->bytes;
		out->value.packets += v->packets;
		out->value.wire_bytes += v->wire_bytes;
	}
}

/* Whole map in as few syscalls as possible; -2 when the kernel lacks batch
 * ops for this map type, so the caller falls back. */
static int cx_read_batch(struct cx_counters *cx, __u32 *total)
{
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	int fd = bpf_map__fd(cx->skel->maps.cx_dest);
	__u32 token, n;
	bool first = true;
	int err;

	*total = 0;
	while (*total < cx->capacity) {
		n = cx->capacity - *total;
		err = bpf_map_lookup_batch(fd, first ? NULL : &token, &token,
					   cx->keys + *total,
					   (char *)cx->pcpu + (size_t)*total * cx->ncpus * CX_PCPU_STRIDE,
					   &n, &opts);
		*total += n;
		if (err == -ENOENT)
			return 0;	/* the last batch: the map is exhausted */
		if (err == -EINVAL && first)
			return -2;
		if (err)
			return cx_fail(CX_STAGE_READ, err, __func__, "lookup batch after %u", *total);
		first = false;
	}
	return 0;
}

static int cx_read_iter(struct cx_counters *cx, __u32 *total)
{
	int fd = bpf_map__fd(cx->skel->maps.cx_dest);
	__u32 key, *prev = NULL;

	*total = 0;
	while (*total < cx->capacity && !bpf_map_get_next_key(fd, prev, &key)) {
		char *vals = (char *)cx->pcpu + (size_t)*total * cx->ncpus * CX_PCPU_STRIDE;

		/* An LRU eviction between the two calls is not an error. */
		if (bpf_map_lookup_elem(fd, &key, vals)) {
			if (errno == ENOENT)
				continue;
			return cx_fail(CX_STAGE_READ, errno, __func__, "lookup key %08x", key);
		}
		cx->keys[*total] = key;
		prev = &cx->keys[*total];
		(*total)++;
	}
	return 0;
}

int cx_counters_read(struct cx_counters *cx, struct cx_entry *out, __u32 capacity)
{
	__u32 total = 0, i;
	int err = -2;

	cx_libbpf_msg[0] = '\0';
	if (!cx || !cx->skel || !out || capacity < cx->capacity)
		return cx_fail(CX_STAGE_ARG, EINVAL, __func__, "capacity %u, need %u",
			       capacity, cx ? cx->capacity : 0);
	if (cx->use_batch)
		err = cx_read_batch(cx, &total);
	if (err == -2) {
		cx->use_batch = false;
		err = cx_read_iter(cx, &total);
	}
	if (err)
		return -1;
	for (i = 0; i < total; i++)
		cx_sum(cx, i, &out[i]);
	return (int)total;
}

int cx_counters_read_other(struct cx_counters *cx, struct cx_value *out)
{
	struct cx_entry sum;
	__u32 zero = 0;

	if (!cx || !cx->skel || !out)
		return cx_fail(CX_STAGE_ARG, EINVAL, __func__, "no counters or no output");
	if (bpf_map_lookup_elem(bpf_map__fd(cx->skel->maps.cx_other), &zero, cx->pcpu))
		return cx_fail(CX_STAGE_READ, errno, __func__, "lookup non-IPv4 slot");
	cx->keys[0] = 0;
	cx_sum(cx, 0, &sum);
	*out = sum.value;
	return 0;
}

__u32 cx_counters_capacity(const struct cx_counters *cx)
{
	return cx ? cx->capacity : 0;
}

int cx_counters_filter(const struct cx_counters *cx, __u32 *handle,
		       __u32 *priority, __u32 *prog_id)
{
	if (!cx)
		return cx_fail(CX_STAGE_ARG, ENOENT, __func__, "no counters");
	return cx_filter_id(&cx->filter, handle, priority, prog_id);
}

void cx_counters_use_batch(struct cx_counters *cx, bool use_batch)
{
	if (cx)
		cx->use_batch = use_batch;
}
