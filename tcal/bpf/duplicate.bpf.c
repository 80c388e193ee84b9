// SPDX-License-Identifier: GPL-2.0
/* Collapsar per-destination packet duplication (tc clsact egress,
 * direct-action); see duplicate.h for what a copy is and how it is marked.
 *
 * Not netem's duplicate: a netem that duplicates refuses to share a tree with
 * any other netem ("cannot mix duplicating netems with other netems in
 * tree"), and every Collapsar tree has a netem per destination.
 * CO-RE against the running kernel's BTF; only helpers that kernel 6.1 has.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "counters.h"
#include "duplicate.h"

/* From linux/pkt_cls.h and linux/if_ether.h, which vmlinux.h lacks (macros). */
#define TC_ACT_UNSPEC (-1)
#define ETH_P_IP 0x0800

/* Destination IPv4 address (network order) -> probability (duplicate.h).
 * Written by the user side only, read here; max_entries set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} cx_dup_ratio SEC(".maps");

SEC("tc")
int cx_dup_egress(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	__u32 daddr, *ratio;

	if (mark & CX_DUP_MARK) {
		/* Our copy, back through this hook: it goes on, once. */
		skb->mark = mark & ~CX_DUP_MARK;
		return TC_ACT_UNSPEC;
	}
	if (skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, CX_ETH_HLEN + offsetof(struct iphdr, daddr), &daddr, sizeof(daddr)))
		return TC_ACT_UNSPEC;
	ratio = bpf_map_lookup_elem(&cx_dup_ratio, &daddr);
	if (!ratio || bpf_get_prandom_u32() > *ratio)
		return TC_ACT_UNSPEC;
	/* The clone is sent at once, through this hook again and into the
	 * qdisc tree, before this call returns: enqueued ahead of the original,
	 * as netem's copy is.  A failed copy (no memory, the device going away)
	 * is a copy not made; the original goes on regardless. */
	skb->mark = mark | CX_DUP_MARK;
	bpf_clone_redirect(skb, skb->ifindex, 0);
	skb->mark = mark;
	/* UNSPEC, not OK: the filters behind ours on this clsact still run. */
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
