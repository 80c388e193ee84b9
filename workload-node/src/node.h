/* node: shared structures of wl-node (workers, connections, jobs).
 * node.c owns the event loop, forward.c the FORWARD engine, storage.c the
 * storage thread. A worker owns its connections and jobs; nothing is shared
 * between workers except the storage queue and the counters it reads. */
#pragma once
#include "net.h"
#include "wire.h"

#include <pthread.h>

#define WL_MAX_BINDS 8
#define WL_MAX_CPUS 256
#define WL_READ_CHUNK 65536 /* bytes per recv into a worker's read buffer */
#define WL_SLICE_NS 200000   /* time a connection's requests may take per loop pass */

enum wl_accept_mode { WL_AM_CHILD, WL_AM_SHARED, WL_AM_PARENT };
enum wl_conn_kind { WL_CONN_LISTEN, WL_CONN_UDP, WL_CONN_IN, WL_CONN_OUT, WL_CONN_WAKE };

struct wl_counters { /* updated by owners with relaxed atomics, read by SIGUSR1 */
	uint64_t requests, replies, malformed, truncated, oversized, accepted, closed;
	uint64_t forwards, fwd_timeouts, fwd_errors, fwd_retries, loads, stores, fsyncs, storage_errors;
	uint64_t bytes_in, bytes_out;
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
};

struct wl_conn {
	enum wl_conn_kind kind;
	int fd;
	struct wl_worker *w;
	uint32_t slot, gen;
	struct wl_buf in, out;
	bool dead, connecting, want_out;
	bool more, backlogged; /* complete requests wait in in for the next pass */
	bool flush_queued;     /* replies wait in out for wl_worker_flush */
	struct wl_addr peer; /* outbound target */
	struct wl_conn *next_dead;
};

struct wl_job {
	struct wl_worker *w;
	uint32_t conn_slot, conn_gen; /* TCP origin; stale once the client is gone */
	int udp_fd;                   /* UDP origin, or -1 */
	struct sockaddr_storage udp_peer;
	socklen_t udp_peerlen;
	uint64_t id;
	uint8_t trace_id[16], span_id[8], parent_span[8];
	uint64_t start_rt_ns;
	uint8_t *msg;
	struct wl_cursor cur;
	uint32_t reply_len;
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
	volatile int stop;
	pthread_barrier_t started; /* workers and main: no request is served before every worker is set up */
};

/* node.c */
void wl_job_resume(struct wl_job *job);                 /* continue the chain */
void wl_job_finish(struct wl_job *job, uint8_t status); /* reply and free */
struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events);
void wl_conn_kill(struct wl_conn *c);
int wl_conn_flush(struct wl_conn *c);
void wl_conn_queue_flush(struct wl_conn *c); /* send c's replies at the next wl_worker_flush */
/* Append c to a growable list (flush queue, backlog); -1 when out of memory. */
int wl_conn_list_push(struct wl_conn ***list, size_t *n, size_t *cap, struct wl_conn *c);
void wl_worker_flush(struct wl_worker *w);   /* send every queued connection's replies */
void wl_conn_reap(struct wl_worker *w); /* free connections killed during this loop pass */
void wl_buf_trim(struct wl_buf *b);      /* release an empty buffer that grew large */
void wl_worker_post_done(struct wl_worker *w, struct wl_job *job); /* any thread */

/* sched.c */
int wl_sched_parse(const char *spec, struct wl_sched *out);
int wl_sched_apply(const struct wl_sched *s, const char *who); /* to the calling thread */

/* compute.c */
void wl_compute_calibrate(void);
void wl_compute(struct wl_worker *w, const struct wl_op *op);

/* forward.c */
void wl_fwd_start(struct wl_job *job);
void wl_fwd_on_reply(struct wl_worker *w, const uint8_t *msg, size_t len);
void wl_fwd_conn_failed(struct wl_conn *c);
void wl_fwd_sweep(struct wl_worker *w, uint64_t now_ns);
int wl_fwd_timeout_ms(struct wl_worker *w, uint64_t now_ns); /* -1: nothing pending */
void wl_fwd_outbound_ready(struct wl_conn *c);

/* storage.c */
int wl_storage_open(struct wl_node *node);
void wl_storage_submit(struct wl_storage *st, struct wl_job *job);
void wl_storage_close(struct wl_storage *st);
void wl_storage_counters(struct wl_storage *st, uint64_t *fsyncs, uint64_t *errors);
