/* conn: a worker's connections: registration in its poller, slots with
 * generations (a job names its origin by slot and generation, so a
 * connection closed meanwhile is noticed), deferred close, buffered and
 * batched sends, and backpressure: a client connection that holds
 * --max-backlog bytes (unsent replies, unfinished requests) is not read
 * until it drains, so a client that never reads cannot grow the node.
 * Called by the loop (worker.c), job.c and forward.c; it still calls back
 * up into forward.c (an outbound connection closed) and worker.c (the
 * backlog of connections to drain). */
#pragma once
#include "net.h"
#include "outq.h"
#include "rxstamp.h"

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
