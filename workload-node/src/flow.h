/* flow: what goes out on a connection and how fast requests may come in.
 * Replies and forwarded requests are queued (outq.h) and sent in batches:
 * every reply made while handling one read or one loop pass goes out in
 * one send. Backpressure: a client connection that holds --max-backlog
 * bytes (unsent replies, unfinished requests) is not read until it
 * drains, so a client that never reads cannot grow the node; a client
 * that half-closed is closed once everything it sent is answered. Called
 * by the loop (worker.c, reader.c, drain.c), job.c and forward.c; calls
 * conn.c. */
#pragma once
#include "conn.h"

/* The flush queue of a worker (in struct wl_worker): connections with replies not yet sent. */
struct wl_flow {
	struct wl_conn **queue;
	size_t n, cap;
};

int wl_flow_send(struct wl_conn *c); /* send what is queued; -1: the connection is gone */
void wl_flow_put_reply(struct wl_conn *c, uint64_t id, const uint8_t trace_id[16], uint8_t status,
		       uint32_t reply_len); /* queue a reply; its padding is not stored (outq.h) */
void wl_flow_queue(struct wl_conn *c);          /* send c's replies at the next wl_flow_send_queued */
void wl_flow_send_queued(struct wl_worker *w);  /* send every queued connection's replies */
bool wl_flow_full(const struct wl_conn *c);     /* holds --max-backlog or more */
void wl_flow_stall(struct wl_conn *c);          /* stop reading it until it drains */
void wl_flow_progress(struct wl_conn *c);       /* after it sent or finished work: resume, or close at EOF */
void wl_flow_set_eof(struct wl_conn *c);        /* the client half-closed: answer what came, then close */
