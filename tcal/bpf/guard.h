/* The guard's program (guard.c): one socket-less eBPF program that drops
 * every packet it is attached to see.  collapsar.tcal.guard attaches it, by
 * the descriptor this returns, as a direct-action tc filter at clsact egress
 * of an instance's host-side veth: every path *to* that instance cut in one
 * netlink message, where cutting it in every other instance's tree costs one
 * message per tree. */
#ifndef CX_GUARD_H
#define CX_GUARD_H

/* Load the program (BPF_PROG_TYPE_SCHED_CLS, "return TC_ACT_SHOT"); returns
 * its descriptor, or -1 with cx_last_error() set (loader.h). */
int cx_guard_load(void);

#endif /* CX_GUARD_H */
