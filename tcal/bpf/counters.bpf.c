// SPDX-License-Identifier: GPL-2.0
/* Collapsar per-destination egress counters (tc clsact egress, direct-action).
 *
 * Counts, per destination IPv4 address, the bytes and packets an instance
 * sends, and estimates what an Ethernet link would carry for them (see
 * counters.h for exactly what each field means).  Packets pass untouched.
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
#define IPPROTO_TCP_NR 6
#define IPPROTO_UDP_NR 17

/* Set by the loader before load, so the estimate follows the TCAL's model. */
const volatile __u32 wire_overhead_bytes = CX_WIRE_OVERHEAD_BYTES;
const volatile __u32 min_frame_bytes = CX_MIN_FRAME_BYTES;

/* LRU: traffic to addresses the experiment does not know (a container's own
 * DNS, updates) must not fill the map and lock real destinations out; an idle
 * entry is evicted instead.  Per-CPU: no atomics on the packet path, the
 * reader sums the CPUs.  max_entries is set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct cx_value);
} cx_dest SEC(".maps");

/* Non-IPv4 traffic (ARP, IPv6) in one slot of its own, so it is visible but
 * never mistaken for a destination. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cx_value);
} cx_other SEC(".maps");

/* Wire packets and bytes of one skb whose segments each carry hdr_len bytes of
 * headers (L2 included). */
static __always_inline void cx_measure(struct __sk_buff *skb, __u32 hdr_len,
				       struct cx_value *out)
{
	__u32 len = skb->len;
	__u32 segs = 1;
	__u32 last = len;

	if (skb->gso_size && len > hdr_len) {
		__u32 payload = len - hdr_len;

		segs = skb->gso_segs;
		/* Untrusted (virtio, tap) GSO packets may arrive with gso_segs unset. */
		if (!segs)
			segs = (payload + skb->gso_size - 1) / skb->gso_size;
		if (!segs)
			segs = 1;
		last = hdr_len + payload - (segs - 1) * skb->gso_size;
	}
	out->bytes = len;
	out->packets = segs;
	/* Every segment repeats the headers and pays the per-frame overhead. */
	out->wire_bytes = (__u64)len + (__u64)(segs - 1) * hdr_len +
			  (__u64)segs * wire_overhead_bytes;
	/* Only the last (or only) segment can be shorter than the minimum frame. */
	if (last < min_frame_bytes)
		out->wire_bytes += min_frame_bytes - last;
}

static __always_inline void cx_add(struct cx_value *acc, const struct cx_value *v)
{
	acc->bytes += v->bytes;
	acc->packets += v->packets;
	acc->wire_bytes += v->wire_bytes;
}

/* L2+L3+L4 header bytes of an IPv4 packet, for repeating them per segment. */
static __always_inline __u32 cx_ipv4_hdr_len(struct __sk_buff *skb, struct iphdr *ip)
{
	__u32 l3 = ip->ihl * 4;
	__u8 doff_byte;

	if (ip->protocol == IPPROTO_UDP_NR)
		return CX_ETH_HLEN + l3 + 8;
	if (ip->protocol != IPPROTO_TCP_NR)
		return CX_ETH_HLEN + l3;
	/* Data offset is the high nibble of byte 12 of the TCP header. */
	if (bpf_skb_load_bytes(skb, CX_ETH_HLEN + l3 + 12, &doff_byte, 1))
		return CX_ETH_HLEN + l3 + 20;
	return CX_ETH_HLEN + l3 + (doff_byte >> 4) * 4;
}

SEC("tc")
int cx_count_egress(struct __sk_buff *skb)
{
	struct cx_value v, *acc;
	struct iphdr ip;
	__u32 zero = 0;

	/* A copy the duplicator made: the instance did not send it (netem's
	 * copies were never counted either).  The duplicator's filter runs
	 * after ours, so the copy still carries its mark here. */
	if (skb->mark & CX_DUP_MARK)
		goto pass;
	/* bpf_skb_load_bytes, not direct access: headers may sit in paged data. */
	if (skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, CX_ETH_HLEN, &ip, sizeof(ip))) {
		cx_measure(skb, CX_ETH_HLEN, &v);
		acc = bpf_map_lookup_elem(&cx_other, &zero);
		if (acc)
			cx_add(acc, &v);
		goto pass;
	}
	cx_measure(skb, cx_ipv4_hdr_len(skb, &ip), &v);
	acc = bpf_map_lookup_elem(&cx_dest, &ip.daddr);
	if (acc) {
		cx_add(acc, &v);
		goto pass;
	}
	/* First packet to this address: insert it with this packet's counts;
	 * if another CPU inserted it meanwhile, add to that entry instead. */
	if (bpf_map_update_elem(&cx_dest, &ip.daddr, &v, BPF_NOEXIST)) {
		acc = bpf_map_lookup_elem(&cx_dest, &ip.daddr);
		if (acc)
			cx_add(acc, &v);
	}
pass:
	/* UNSPEC, not OK: the packet passes untouched and any filter a user put
	 * behind ours on this clsact still gets to see it. */
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
