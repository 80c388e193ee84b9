/* outbound: a worker's cache of outbound connections, one per FORWARD
 * target (address and protocol), reused by every forward to it. Bounded:
 * at most --max-fwd-conns per worker (a new target closes the least
 * recently used one without a forward pending; with none idle, the forward
 * fails), and one unused for --fwd-idle is closed. Called by forward.c and
 * the loop (worker.c); calls conn.c. */
#pragma once
#include "wire.h"

struct wl_worker;
struct wl_conn;

/* In struct wl_worker: outbound.c's alone. */
struct wl_outs {
	struct wl_conn **conns;
	size_t n, cap;
	uint64_t idle_check_ns; /* earliest time one of them may turn idle */
};

/* The connection to t, opened (connecting) if there is none; NULL when
 * none can be had (counted when the cache is full of busy ones). */
struct wl_conn *wl_out_get(struct wl_worker *w, const struct wl_target *t);
void wl_out_note_idle(struct wl_worker *w, const struct wl_conn *c); /* c has no forward pending now */
void wl_out_close_idle(struct wl_worker *w, uint64_t now_ns);     /* --fwd-idle */
uint64_t wl_out_next_idle(const struct wl_worker *w); /* when the first one turns idle; UINT64_MAX: none */
/* Connections closed during this loop pass (conn.c closes them without
 * telling anyone) leave the cache: before the loop frees them. */
void wl_out_forget_closed(struct wl_worker *w);
