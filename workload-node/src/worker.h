/* worker: one event loop per worker thread, and everything a worker owns:
 * its poller, connections, jobs, pending forwards, read buffer, inbox and
 * counters. Nothing is shared between workers but the storage queue, the
 * count of open connections (node.h) and the counters, read by SIGUSR1.
 * node.c sets the workers up and starts their threads; the loop calls
 * reader.c, job.c, forward.c, outbound.c, flow.c, conn.c, inbox.c and
 * spans.c. */
#pragma once
#include "flow.h"
#include "forward.h"
#include "inbox.h"
#include "job.h"
#include "outbound.h"
#include "node.h"

struct wl_counters { /* updated by owners with relaxed atomics, read by SIGUSR1 */
	uint64_t requests, replies, malformed, truncated, oversized, accepted, closed;
	uint64_t forwards, fwd_timeouts, fwd_errors, fwd_retries, loads, stores, fsyncs, storage_errors;
	uint64_t bytes_in, bytes_out;
	/* caps.c: requests answered ERR for a cap, connections refused or closed */
	uint64_t over_reply, over_request, over_compute, over_backlog, over_conns, over_fwd_conns;
	uint64_t paused, fwd_closed; /* reads stopped for a full backlog; outbound connections closed */
};
#define WL_COUNT(w, field, n) __atomic_fetch_add(&(w)->ctr.field, (n), __ATOMIC_RELAXED)

struct wl_worker {
	int index;
	struct wl_node *node;
	pthread_t thread;
	struct wl_poller poller;
	struct wl_inbox inbox; /* from the storage thread and the acceptor */
	struct wl_conn wake;   /* the inbox's eventfd in the poller */
	struct wl_conns conns; /* conn.c */
	struct wl_flow flow;   /* flow.c */
	struct wl_fwds fwd;    /* forward.c */
	struct wl_outs outs;   /* outbound.c */
	uint32_t gen;          /* generations of connection and pending slots: one counter */
	struct wl_buf rbuf; /* reads land here; a connection keeps only a partial message */
	struct wl_counters ctr;
	struct wl_trace *trace;
	int setup_rc; /* pinning and --sched, reported to main before serving */
};

/* Worker index of node: its poller, and its inbox's eventfd in it. */
int wl_worker_init(struct wl_worker *w, struct wl_node *node, int index);
void *wl_worker_main(void *arg); /* the thread: arg is its struct wl_worker */
