/* node: shared structures of wl-node (workers, connections, jobs).
 * node.c owns the options, threads and signals, worker.c the event loop,
 * job.c a request's life, conn.c connections, forward.c the FORWARD engine,
 * storage.c the storage thread, caps.c the limits on what a request or a
 * peer may make the node hold. A worker owns its connections and jobs;
 * nothing is shared between workers except the storage queue, the count
 * of open connections and the counters. */
#pragma once
#include "net.h"
#include "outq.h"
#include "rxstamp.h"
#include "wire.h"

#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>

#define WL_MAX_BINDS 8
#define WL_MAX_CPUS 256
#define WL_READ_CHUNK 65536 /* bytes per recv into a worker's read buffer */
#define WL_SLICE_NS 200000   /* time a connection's requests may take per loop pass */

enum wl_accept_mode { WL_AM_CHILD, WL_AM_SHARED, WL_AM_PARENT };
enum wl_conn_kind { WL_CONN_LISTEN, WL_CONN_UDP, WL_CONN_IN, WL_CONN_OUT, WL_CONN_WAKE };

enum wl_cap { WL_CAP_NONE, WL_CAP_REPLY, WL_CAP_REQUEST, WL_CAP_COMPUTE }; /* caps.c: what a request exceeds */

struct wl_counters { /* updated by owners with relaxed atomics, read by SIGUSR1 */
	uint64_t requests, replies, malformed, truncated, oversized, accepted, closed;
	uint64_t forwards, fwd_timeouts, fwd_errors, fwd_retries, loads, stores, fsyncs, storage_errors;
	uint64_t bytes_in, bytes_out;
	/* caps.c: requests answered ERR for a cap, connections refused or closed */
	uint64_t over_reply, over_request, over_compute, over_backlog, over_conns, over_fwd_conns;
	uint64_t paused, fwd_closed; /* reads stopped for a full backlog; outbound connections closed */
};
#define WL_COUNT(w, field, n) __atomic_fetch_add(&(w)->ctr.field, (n), __ATOMIC_RELAXED)

enum wl_sched_policy { WL_SCHED_DEFAULT, WL_SCHED_OTHER, WL_SCHED_RR, WL_SCHED_FIFO, WL_SCHED_DEADLINE };

struct wl_sched {
	enum wl_sched_policy policy;
	int value; /* nice (other) or priority (rr, fifo) */
	uint64_t runtime_ns, deadline_ns, period_ns;
};

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

struct wl_conn {
	enum wl_conn_kind kind;
	int fd;
	struct wl_worker *w;
	uint32_t slot, gen;
	struct wl_buf in;
	struct wl_outq out;
	uint32_t events; /* WL_EV_* registered in the poller */
	bool dead, connecting, want_out;
	bool more, backlogged; /* complete requests wait in in for the next pass */
	bool flush_queued;     /* replies wait in out for wl_worker_flush */
	bool stalled;          /* not read until its backlog drains (--max-backlog) */
	bool eof;              /* the client is done sending: close once everything is answered */
	uint64_t skip;         /* bytes of the current message still to drop unread */
	size_t held;           /* memory held for this connection's unfinished requests */
	struct wl_addr peer;   /* outbound target */
	uint32_t npend;        /* outbound: forwards waiting for a reply on it */
	uint64_t last_used_ns; /* outbound: last forward sent or settled */
	struct wl_rx_stamp rx_at; /* tracing: when the last read's bytes arrived, and the read */
	struct wl_conn *next_dead;
};

struct wl_job {
	struct wl_worker *w;
	uint32_t conn_slot, conn_gen; /* TCP origin; stale once the client is gone */
	int udp_fd;                   /* UDP origin, or -1 */
	struct sockaddr_storage peer; /* the sender: where a UDP reply goes; for TCP only when tracing */
	socklen_t peerlen;
	uint64_t id;
	/* tracing (spans.c): the serve span, its start (the kernel's receive of
	 * the request's last byte), when the node read that byte, when its first
	 * op started, the forward span of the FORWARD in progress */
	uint8_t trace_id[16], span_id[8], parent_span[8], fwd_span[8];
	uint64_t start_rt_ns, read_rt_ns, first_op_rt_ns;
	uint32_t req_bytes;
	uint16_t skipped;
	uint8_t *msg;
	struct wl_cursor cur;
	uint32_t reply_len;
	size_t held; /* charged to the origin connection until the reply is queued */
	/* the op in progress (storage or forward) */
	struct wl_op op;
	uint64_t op_start_rt_ns;
	int ok, failed, timeouts, npending;
	uint32_t pending[WL_MAX_TARGETS]; /* pend slots, UINT32_MAX when settled */
	int storage_rc;
	struct wl_job *next; /* completion queue link */
};

struct wl_pending {
	struct wl_job *job;
	struct wl_conn *conn;
	uint32_t gen;
	uint8_t target, attempt;
	bool in_use, failed; /* failed: connection error, settle as ERR at next sweep */
	uint64_t deadline_ns;
	uint8_t span_id[8];
	uint64_t start_rt_ns;
};

struct wl_node;

struct wl_worker {
	int index;
	struct wl_node *node;
	pthread_t thread;
	struct wl_poller poller;
	struct wl_conn wake; /* eventfd: storage completions, parent-mode handoffs, stop */
	pthread_mutex_t lock;
	struct wl_job *done_head, *done_tail;
	int *handoff;
	size_t nhandoff, handoff_cap;
	struct wl_conn **conns;
	uint32_t nconns;
	size_t conns_cap;
	uint32_t *free_slots, nfree;
	struct wl_pending *pend;
	uint32_t pend_cap, pend_inuse, pend_gen;
	struct wl_conn **outs;
	size_t nouts, outs_cap;
	uint64_t idle_check_ns; /* earliest time an outbound connection may turn idle */
	struct wl_conn *dead;
	struct wl_buf rbuf; /* reads land here; a connection keeps only a partial message */
	struct wl_conn **backlog;
	size_t nbacklog, backlog_cap;
	struct wl_conn **flushq; /* connections with replies not yet sent */
	size_t nflush, flush_cap;
	struct wl_counters ctr;
	struct wl_trace *trace;
	int setup_rc; /* pinning and --sched, reported to main before serving */
};

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

/* job.c */
/* A complete message: validated (NULL, counted, if it breaks a rule), copied
 * without its padding; *cap says which cap it exceeds, if any. */
struct wl_job *wl_job_accept(struct wl_worker *w, const uint8_t *msg, size_t len, const struct wl_rx_stamp *rx_at,
			     enum wl_cap *cap); /* rx_at: when tracing, when the message arrived */
/* Charge the job to its origin and run it, or answer ERR at once for a cap. */
void wl_job_start(struct wl_job *job, struct wl_conn *origin, enum wl_cap cap);
void wl_job_resume(struct wl_job *job);                 /* continue the chain */
void wl_job_finish(struct wl_job *job, uint8_t status); /* reply and free */

/* spans.c: the node's spans (only when the worker traces); status is a wl.status (trace.h) */
void wl_span_job_init(struct wl_job *job, const struct wl_hdr *hdr, const struct wl_rx_stamp *rx_at); /* ids, start */
void wl_span_serve(const struct wl_job *job, int status, uint32_t reply_bytes, uint64_t end_rt_ns);
void wl_span_op(const struct wl_job *job, int status, uint64_t end_rt_ns); /* COMPUTE, LOAD, STORE */
void wl_span_forward(const struct wl_job *job, int status, uint64_t end_rt_ns);
/* reply_rt_ns: the kernel's receive of the reply that settles it; 0 without a reply */
void wl_span_forward_send(const struct wl_pending *p, int status, uint64_t end_rt_ns, uint64_t reply_rt_ns);
void wl_span_refused(struct wl_conn *c, const struct wl_hdr *hdr); /* over --max-request, never read */

/* worker.c (the loop) and conn.c (connections) */
bool wl_conn_admit(struct wl_worker *w); /* a client connection within --max-conns (else counted) */
void wl_conn_unadmit(struct wl_node *node); /* give an admission back (the connection was closed) */
/* A client connection (WL_CONN_IN) must have been admitted; failing, it gives the admission back. */
struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events);
void wl_conn_kill(struct wl_conn *c);
int wl_conn_flush(struct wl_conn *c); /* -1: the connection is gone */
void wl_conn_put_reply(struct wl_conn *c, uint64_t id, const uint8_t trace_id[16], uint8_t status,
		       uint32_t reply_len); /* queue a reply; its padding is not stored (outq.h) */
bool wl_conn_full(const struct wl_conn *c);  /* holds --max-backlog or more */
void wl_conn_stall(struct wl_conn *c);       /* stop reading it until it drains */
void wl_conn_progress(struct wl_conn *c);    /* after it sent or finished work: resume, or close at EOF */
void wl_conn_set_eof(struct wl_conn *c);     /* the client half-closed: answer what came, then close */
void wl_conn_queue_flush(struct wl_conn *c); /* send c's replies at the next wl_worker_flush */
/* Append c to a growable list (flush queue, backlog); -1 when out of memory. */
int wl_conn_list_push(struct wl_conn ***list, size_t *n, size_t *cap, struct wl_conn *c);
void wl_worker_flush(struct wl_worker *w);   /* send every queued connection's replies */
void wl_conn_reap(struct wl_worker *w); /* free connections killed during this loop pass */
void wl_buf_trim(struct wl_buf *b);      /* release an empty buffer that grew large */
void wl_worker_post_done(struct wl_worker *w, struct wl_job *job); /* any thread */
void wl_worker_backlog_add(struct wl_conn *c); /* drain c's buffered requests in the next pass */

/* caps.c */
void wl_caps_defaults(struct wl_node_cfg *cfg);
size_t wl_caps_options(struct option *opts, size_t n, size_t max); /* appends; returns the new n */
bool wl_caps_is_option(int getopt_val);
int wl_caps_parse(int getopt_val, const char *arg, struct wl_node_cfg *cfg);
void wl_caps_usage(FILE *out);
int wl_caps_fd_budget(struct wl_node_cfg *cfg); /* raise RLIMIT_NOFILE for --max-conns and friends */
/* What a valid request asks beyond this node's caps (WL_CAP_NONE: nothing); used is
 * the length of its header and chain (wl_validate_request). */
enum wl_cap wl_caps_check(const struct wl_node_cfg *cfg, const uint8_t *msg, size_t used);

/* sched.c */
int wl_sched_parse(const char *spec, struct wl_sched *out);
int wl_sched_apply(const struct wl_sched *s, const char *who); /* to the calling thread */

/* compute.c */
void wl_compute_calibrate(void);
void wl_compute_loops(double loops_per_us); /* --loops-per-usec (after calibrating, when 0) */
void wl_compute(struct wl_worker *w, const struct wl_op *op);

/* forward.c */
void wl_fwd_start(struct wl_job *job);
void wl_fwd_on_reply(struct wl_worker *w, const uint8_t *msg, size_t len, uint64_t rx_rt_ns);
void wl_fwd_conn_failed(struct wl_conn *c);
void wl_fwd_sweep(struct wl_worker *w, uint64_t now_ns);
int wl_fwd_timeout_ms(struct wl_worker *w, uint64_t now_ns); /* -1: nothing pending */
void wl_fwd_outbound_ready(struct wl_conn *c);
void wl_fwd_close_idle(struct wl_worker *w, uint64_t now_ns); /* --fwd-idle */

/* storage_file.c: where the storage file lives, opened without following symlinks */
struct wl_storage_file {
	int fd;
	int dirfd;     /* the default file's private directory, or -1 for a -s path */
	char name[32]; /* the default file's name in it: removed at exit */
	char path[PATH_MAX];
};
int wl_storage_file_open(const char *path, bool odirect, struct wl_storage_file *f); /* path NULL: the default */
void wl_storage_file_close(struct wl_storage_file *f);

/* storage.c */
int wl_storage_open(struct wl_node *node);
void wl_storage_submit(struct wl_storage *st, struct wl_job *job);
void wl_storage_close(struct wl_storage *st);
void wl_storage_counters(struct wl_storage *st, uint64_t *fsyncs, uint64_t *errors);
