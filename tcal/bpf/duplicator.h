/* The duplicator in libcxcounters: load duplicate.bpf.c, attach it at clsact
 * egress of one interface inside one network namespace, set and remove one
 * destination's probability, detach.  Errors as in loader.h (cx_last_error,
 * cx_last_errno, cx_last_stage).
 */
#ifndef CX_DUPLICATOR_H
#define CX_DUPLICATOR_H

#include <linux/types.h>
#include "duplicate.h"

struct cx_dup;

/* Load the program and attach it at clsact egress of ifname in netns (as in
 * cx_counters_attach) at tc `priority`: it must run after the counters'
 * filter, which then sees a copy still marked (duplicate.h), so the caller
 * passes a priority above theirs (the kernel gives an automatic one below
 * the lowest there, 49152 on an empty clsact).  max_entries bounds the
 * destinations with a probability. */
struct cx_dup *cx_dup_attach(const char *ifname, const char *netns, __u32 max_entries, __u32 priority);

/* Copy packets to daddr_be (network order) with probability `ratio`
 * (duplicate.h); 0 removes the destination (no error if it had none). */
int cx_dup_set(struct cx_dup *dup, __u32 daddr_be, __u32 ratio);

/* Remove our filter (and our clsact if we made it); safe to call again and
 * after the interface or namespace is gone. */
int cx_dup_detach(struct cx_dup *dup);

/* Detach (best effort) and release everything; NULL is fine. */
void cx_dup_free(struct cx_dup *dup);

/* tc handle, priority and program id of our filter, for checks and logs. */
int cx_dup_filter(const struct cx_dup *dup, __u32 *handle, __u32 *priority, __u32 *prog_id);

#endif /* CX_DUPLICATOR_H */
