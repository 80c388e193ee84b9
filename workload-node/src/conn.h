/* conn: a worker's connections, from admission to free: --max-conns,
 * slots with generations (a job names its origin by slot and generation,
 * so a connection closed meanwhile is noticed), registration in the
 * worker's poller, close deferred to the end of the loop pass, and the
 * backlog of connections whose requests wait for the next pass. What goes
 * out on a connection, and when it is read, is flow.h's. Called by the
 * loop (worker.c, reader.c), accept.c, job.c, forward.c, outbound.c and
 * flow.c; calls nothing of wl-node's: forward.c and outbound.c notice the
 * outbound connections it closed themselves (wl_fwd_forget_closed). */
#pragma once
#include "net.h"
#include "outq.h"
#include "rxstamp.h"

#define WL_READ_CHUNK 65536 /* bytes per recv; a connection's buffer grown beyond is released once empty */

enum wl_conn_kind { WL_CONN_LISTEN, WL_CONN_UDP, WL_CONN_IN, WL_CONN_OUT, WL_CONN_WAKE };

struct wl_worker;
struct wl_node;

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
	bool flush_queued;     /* replies wait in out for wl_flow_send_queued */
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

/* A worker's connections (in struct wl_worker): conn.c's alone. */
struct wl_conns {
	struct wl_conn **slots; /* by slot, NULL when free */
	uint32_t n;             /* slots made */
	size_t cap;
	uint32_t *free_slots, nfree; /* reused first */
	struct wl_conn *dead;        /* killed during this loop pass, freed by wl_conn_reap */
	struct wl_conn **backlog;    /* complete requests left for the next pass */
	size_t nbacklog, backlog_cap;
};

bool wl_conn_admit(struct wl_worker *w); /* a client connection within --max-conns (else counted) */
void wl_conn_unadmit(struct wl_node *node); /* give an admission back (the connection was closed) */
/* A client connection (WL_CONN_IN) must have been admitted; failing, it gives the admission back. */
struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events);
void wl_conn_kill(struct wl_conn *c);   /* closed now, freed by wl_conn_reap */
void wl_conn_reap(struct wl_worker *w); /* free connections killed during this loop pass */
/* The connection in slot if it still has generation gen and is open, else NULL. */
struct wl_conn *wl_conn_at(struct wl_worker *w, uint32_t slot, uint32_t gen);
void wl_conn_trim(struct wl_conn *c); /* release its input buffer if empty and grown large */
/* The backlog: connections whose complete requests wait for the next pass
 * (their time slice ran out, or they were stalled with requests unread). */
void wl_conn_backlog_add(struct wl_conn *c);
/* Up to max connections from the front of the backlog into batch; how many.
 * Each stays marked backlogged until its caller has dealt with it. */
size_t wl_conn_backlog_take(struct wl_worker *w, struct wl_conn **batch, size_t max);
