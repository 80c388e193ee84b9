/* node: what every part of wl-node reads: the configuration (struct
 * wl_node_cfg, filled by node_args.c before any thread starts and only read
 * afterwards) and the node itself (its workers, listening sockets, storage,
 * the count of open connections, the stop flag). Each concern has its own
 * header, which says what it owns, who calls it and what it calls;
 * README.md ("Source layout") shows the whole. */
#pragma once
#include "net.h"
#include "sched_policy.h"

#include <pthread.h>

#define WL_MAX_BINDS 8
#define WL_MAX_CPUS 256

enum wl_accept_mode { WL_AM_CHILD, WL_AM_SHARED, WL_AM_PARENT };

struct wl_node_cfg {
	int nthreads, cpus[WL_MAX_CPUS], ncpus;
	enum wl_accept_mode accept_mode;
	enum wl_poll_mode poll_mode;
	int backlog;
	bool nodelay;
	struct wl_addr binds[WL_MAX_BINDS];
	int nbinds;
	const char *storage_path, *trace_path;
	uint64_t storage_max_bytes, psync_period_ns;
	bool odirect, busy_poll, idle_poll;
	uint64_t poll_window_ns; /* --busy-poll-for: poll this long after the last event before blocking */
	struct wl_sched sched; /* --sched, for the workers */
	/* DistWalk's options (node_args.c) */
	bool cpus_auto;      /* --thread-affinity auto: the CPUs this process may use, in order */
	bool sync_given;     /* --sync: a syncing STORE is flushed by the periodic fsync, not one of its own */
	bool storage_spin;   /* --wait-spin-storage: the storage thread polls its queue instead of sleeping */
	double loops_per_us; /* --loops-per-usec: every COMPUTE a loop of this many iterations per us (0:
			      * calibrated at start); below 0, only -C ...,loop ops */
	/* caps (caps.c): every one a flag with a default */
	uint64_t max_reply_bytes, max_request_bytes, max_compute_ns, max_backlog_bytes;
	uint64_t max_conns, max_fwd_conns, fwd_idle_ns;
	unsigned caps_given; /* bit i: the i-th cap was set on the command line */
};

struct wl_worker;
struct wl_storage;

struct wl_node {
	struct wl_node_cfg cfg;
	struct wl_worker *workers;
	int listen_fds[WL_MAX_BINDS]; /* shared/parent modes */
	struct wl_storage *storage;
	int nconns; /* client connections open, all workers (atomic; --max-conns) */
	volatile int stop;
	pthread_barrier_t started; /* workers and main: no request is served before every worker is set up */
};
