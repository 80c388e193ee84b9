/* sched_policy: the workers' scheduling policy (--sched). node_args.c
 * parses it when the options are read; each worker thread applies it to
 * itself (node.c). Calls nothing of wl-node's. */
#pragma once
#include "util.h"

enum wl_sched_policy { WL_SCHED_DEFAULT, WL_SCHED_OTHER, WL_SCHED_RR, WL_SCHED_FIFO, WL_SCHED_DEADLINE };

struct wl_sched {
	enum wl_sched_policy policy;
	int value; /* nice (other) or priority (rr, fifo) */
	uint64_t runtime_ns, deadline_ns, period_ns;
};

/* "other[:NICE]", "rr:PRIO", "fifo:PRIO", "deadline:R,D,P" or "dl:R,D". */
int wl_sched_parse(const char *spec, struct wl_sched *out);
int wl_sched_apply(const struct wl_sched *s, const char *who); /* to the calling thread */
