/* Shared between duplicate.bpf.c (kernel side), counters.bpf.c (which
 * leaves copies uncounted) and duplicator.c (user side).
 *
 * The duplicator copies packets the way netem's `duplicate` does: per packet
 * sent to a destination IPv4 address with a probability in the map, one
 * copy, sent through the same egress path (qdisc tree included) just before
 * the original, and never copied again.
 *
 * CX_DUP_MARK is the one bit of skb->mark that tells the copy apart while it
 * crosses clsact egress: set on the original around bpf_clone_redirect (the
 * clone inherits it), cleared on the original right after, and cleared on the
 * copy by the duplicator when the copy comes back through its filter.  It
 * never leaves the hook.  A packet an application marked with this bit
 * (SO_MARK) is taken for a copy: it is neither counted nor copied, and loses
 * the bit.
 */
#ifndef CX_DUPLICATE_H
#define CX_DUPLICATE_H

#define CX_DUP_MARK 0x00400000U

/* A probability as netem holds one: a fraction of 2^32 - 1, copied when
 * bpf_get_prandom_u32() <= it; destinations at 0 have no entry. */
#define CX_DUP_ALWAYS 0xFFFFFFFFU

#endif /* CX_DUPLICATE_H */
