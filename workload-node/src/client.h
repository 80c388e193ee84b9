/* client: shared state of wl-client. client.c parses options and runs the
 * pairs; pair.c is one sender/receiver thread pair. */
#pragma once
#include "ops.h"
#include "output.h"
#include "pacing.h"
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
};

struct pair {
	struct client *cl;
	int index;
	pthread_t sender, receiver;
	struct wl_record *recs;
	uint8_t (*ids)[24]; /* trace id + span id per request, when tracing */
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
	uint64_t last_rx_ns;         /* when bytes last arrived */
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

/* solo.c: closed loop and --busy-poll: one thread sends and receives */
void *wl_solo_main(void *arg);

/* replies.c */
void wl_rx_init(struct wl_rx *rx, int fd, uint64_t lo, bool udp);
void wl_rx_free(struct wl_rx *rx);
void wl_rx_expire(struct pair *p, struct wl_rx *rx, uint64_t now); /* resolve lost and timed-out requests */
int wl_rx_wait_ms(struct pair *p, const struct wl_rx *rx, uint64_t now); /* until the oldest deadline, capped */
/* One recv of replies: wait_ms > 0 blocks at most that long, 0 never blocks;
 * 1 if bytes were taken, 0 if none (or the connection was lost). */
int wl_rx_read(struct pair *p, struct wl_rx *rx, int wait_ms);
