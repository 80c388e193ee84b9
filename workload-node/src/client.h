/* client: shared state of wl-client. client.c parses options and runs the
 * pairs; pair.c is one sender/receiver thread pair. */
#pragma once
#include "ops.h"
#include "output.h"
#include "pacing.h"
#include "records_dw.h"
#include "rxstamp.h"
#include "trace.h"

#include <pthread.h>
#include <semaphore.h>

struct client {
	struct wl_addr to;
	struct wl_workload wk;
	int npairs, ncpus, cpus[256];
	uint64_t nreq, nsessions, timeout_ns, seed;
	enum wl_pace_mode pace_mode;
	struct wl_value pace_value;
	uint64_t rss_ns;
	uint64_t poll_window_ns; /* --busy-poll-for: spin this long for a reply before blocking */
	bool spin, busy_poll, idle_poll, nodelay, json, out_json;
	const char *out_path, *trace_path, *sample_spec;
	struct wl_trace *trace;
	uint64_t start_ns, rt_offset_ns;
	volatile int stop;
	/* DistWalk's connection and output options (client_args.c) */
	struct wl_addr bind_addr; /* -b: connect from here */
	bool has_bind, nonblock, conn_times, stag_send;
	uint32_t retry_num;       /* --retry-num: connection attempts after a failed one */
	uint64_t retry_period_ns; /* --retry-period */
	struct wl_dw_output dw_out; /* -o with DistWalk's sub-options, .txt or --nano */
};

/* Per request, when tracing: the trace context it carries and its size. */
struct wl_req_trace {
	uint8_t trace_id[16], span_id[8];
	uint32_t req_bytes;
};

struct pair {
	struct client *cl;
	int index;
	pthread_t sender, receiver;
	struct wl_record *recs;
	struct wl_req_trace *ids; /* when tracing */
	uint64_t *conn_ns;  /* --conn-times: each session's connect() time */
	int udp_refused;    /* UDP: the node's port refused a datagram (ICMP); outstanding requests are ERR (atomic) */
	uint64_t sent;      /* requests sent so far (atomic) */
	int64_t sess_end;   /* index where the current session's sending ended, or -1 */
	uint64_t lo, hi;
	int fd;
	bool finished;
	sem_t ready, done;
	struct wl_summary sum;
	struct wl_rng rng;
};

/* The sending side's state, carried across sessions: the next request's due
 * time (already drawn from the schedule) and the encoding buffer. */
struct wl_sendq {
	struct wl_pace pace;
	uint64_t due;
	bool have_due;
	struct wl_buf buf;
};

/* The receiving side of one session. */
struct wl_rx {
	int fd;
	struct wl_buf in;
	uint64_t cursor; /* oldest request not yet resolved */
	uint64_t tail_left, tail_id; /* bytes still to drop of a large reply */
	uint32_t tail_len;           /* that reply's whole length */
	uint64_t last_rx_ns;         /* when bytes last arrived */
	uint64_t reply_wait_ns;      /* tracing: from the kernel's receive of the last read's bytes to the read */
	uint8_t tail_status;
	bool lost, udp;
	bool shared;  /* a sender thread uses the socket too (see wl_rx_read) */
	int timeo_ms; /* SO_RCVTIMEO currently set, -1 if never */
};

/* pair.c: the two-thread loop (open loop, blocking waits) and sending */
void *wl_sender_main(void *arg);
void *wl_receiver_main(void *arg);
/* Whether a pair runs as one thread (solo.c) rather than a sender and a receiver. */
bool wl_pair_solo(const struct client *cl);
/* One session on connection fd: requests [lo, hi). */
typedef void (*wl_session_fn)(struct pair *p, struct wl_sendq *q, int fd, uint64_t lo, uint64_t hi,
			      uint32_t session);
void wl_pair_run(struct pair *p, wl_session_fn session); /* pin, then every session in turn */
uint64_t wl_pair_send(struct pair *p, struct wl_sendq *q, int fd, uint64_t i, uint64_t hi, uint32_t session,
		      bool *broken);

/* connect.c: session's connection (-b, --retry-num, --non-block, --conn-times); -1 (said) if none */
int wl_session_connect(struct pair *p, uint32_t session);

/* solo.c: closed loop and --busy-poll: one thread sends and receives */
void *wl_solo_main(void *arg);

/* collect.c: with COLLAPSAR_TRACE_DIR and no --trace, the per-request records
 * (as they resolve, flushed every second) and the summary go to the run
 * directory (rundir.h). *out stays NULL when not collecting; -1 (said) on failure. */
struct wl_collect;
int wl_collect_start(struct wl_collect **out, struct client *cl, struct pair *pairs);
int wl_collect_finish(struct wl_collect *c, const struct wl_summary *total); /* frees c */

/* replies.c */
/* Request i never left (its session could not connect): its ERR gets a
 * span too, so that a trace counts what the summary counts. */
void wl_rx_span_unsent(struct pair *p, uint64_t i);
void wl_rx_init(struct wl_rx *rx, int fd, uint64_t lo, bool udp);
void wl_rx_free(struct wl_rx *rx);
void wl_rx_expire(struct pair *p, struct wl_rx *rx, uint64_t now); /* resolve lost and timed-out requests */
int wl_rx_wait_ms(struct pair *p, const struct wl_rx *rx, uint64_t now); /* until the oldest deadline, capped */
/* One recv of replies: wait_ms > 0 blocks at most that long, 0 never blocks;
 * 1 if bytes were taken, 0 if none (or the connection was lost). */
int wl_rx_read(struct pair *p, struct wl_rx *rx, int wait_ms);
