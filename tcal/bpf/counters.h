/* Shared between counters.bpf.c (kernel side) and loader.c (user side).
 *
 * One map entry per destination IPv4 address seen at clsact egress.
 * Counted per skb:
 *   bytes      - sum of skb->len: the layer-2 frame(s) as the stack handed
 *                them down, a GSO super-packet counted once with its headers
 *                once (what a naive counter would report);
 *   packets    - wire packets: gso_segs for a GSO skb, 1 otherwise;
 *   wire_bytes - what an Ethernet link would carry for those packets: every
 *                segment carries its own L2+L3+L4 headers, is padded to the
 *                60-byte Ethernet minimum, and pays wire_overhead_bytes
 *                (default 24 = preamble+SFD 8 + FCS 4 + inter-frame gap 12).
 * Headers per segment are parsed for IPv4 TCP (data offset) and UDP; the
 * non-IPv4 slot (ARP, IPv6) repeats only the Ethernet header per segment, so
 * IPv6 GSO traffic there is slightly underestimated.  Counted at clsact
 * egress: before any qdisc, so packets the shaper later drops are included;
 * the duplicator's copies (duplicate.h) are not.
 */
#ifndef CX_COUNTERS_H
#define CX_COUNTERS_H

/* Ethernet preamble+SFD 8, frame check sequence 4, inter-frame gap 12. */
#define CX_WIRE_OVERHEAD_BYTES 24
/* Shortest Ethernet frame without FCS; shorter frames are padded. */
#define CX_MIN_FRAME_BYTES 60
#define CX_ETH_HLEN 14

struct cx_value {
	__u64 bytes;
	__u64 packets;
	__u64 wire_bytes;
};

/* One destination as handed to the reader: address in network byte order. */
struct cx_entry {
	__u32 daddr_be;
	__u32 pad;
	struct cx_value value;
};

#endif /* CX_COUNTERS_H */
