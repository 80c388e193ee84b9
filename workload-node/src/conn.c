/* conn: a worker's connections: registration in its poller, deferred
 * close, buffered sends. */
#include "node.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


/* Keep per-connection memory small between requests: an idle connection
 * holds no buffers, and a buffer grown for one big message is released. */
void wl_buf_trim(struct wl_buf *b)
{
	if (wl_buf_avail(b) == 0 && b->cap > WL_READ_CHUNK)
		wl_buf_free(b);
	else if (wl_buf_avail(b) == 0)
		b->off = b->len = 0;
}

struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		wl_err("worker %d: out of memory for a connection", w->index);
		return NULL;
	}
	c->kind = kind;
	c->fd = fd;
	c->w = w;
	if (w->nfree) {
		c->slot = w->free_slots[--w->nfree];
	} else {
		/* two arrays of one capacity: conns_cap moves once both have grown */
		size_t conns_cap = w->conns_cap, slots_cap = w->conns_cap;
		if (wl_grow(&w->conns, &conns_cap, w->nconns, sizeof(*w->conns), 64) < 0 ||
		    wl_grow(&w->free_slots, &slots_cap, w->nconns, sizeof(*w->free_slots), 64) < 0) {
			wl_err("worker %d: out of memory for %u connections", w->index, w->nconns + 1);
			free(c);
			return NULL;
		}
		w->conns_cap = conns_cap;
		c->slot = w->nconns++;
	}
	c->gen = ++w->pend_gen;
	w->conns[c->slot] = c;
	if (wl_poller_add(&w->poller, fd, events, c, kind == WL_CONN_LISTEN || kind == WL_CONN_UDP) < 0) {
		w->conns[c->slot] = NULL;
		w->free_slots[w->nfree++] = c->slot;
		free(c);
		return NULL;
	}
	return c;
}

/* Closing is deferred to the end of the loop pass: later events of the same
 * pass may still point at this connection. */
void wl_conn_kill(struct wl_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	struct wl_worker *w = c->w;
	if (wl_poller_del(&w->poller, c->fd) < 0)
		wl_err("worker %d: dropping fd %d from the poller failed", w->index, c->fd);
	if (close(c->fd) < 0)
		wl_err("worker %d: close fd %d: %s", w->index, c->fd, strerror(errno));
	w->conns[c->slot] = NULL;
	w->free_slots[w->nfree++] = c->slot;
	for (size_t i = 0; c->backlogged && i < w->nbacklog; i++) {
		if (w->backlog[i] == c) { /* it is freed at the end of this pass */
			memmove(w->backlog + i, w->backlog + i + 1, (w->nbacklog - i - 1) * sizeof(*w->backlog));
			w->nbacklog--;
			c->backlogged = false;
		}
	}
	if (c->kind == WL_CONN_IN)
		WL_COUNT(w, closed, 1);
	if (c->kind == WL_CONN_OUT)
		wl_fwd_conn_failed(c);
	c->next_dead = w->dead;
	w->dead = c;
}

void wl_conn_reap(struct wl_worker *w)
{
	while (w->dead) {
		struct wl_conn *c = w->dead;
		w->dead = c->next_dead;
		wl_buf_free(&c->in);
		wl_buf_free(&c->out);
		free(c);
	}
}

int wl_conn_flush(struct wl_conn *c)
{
	while (wl_buf_avail(&c->out) > 0 && !c->connecting) {
		ssize_t n = send(c->fd, wl_buf_head(&c->out), wl_buf_avail(&c->out), MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			if (errno != ECONNRESET && errno != EPIPE && errno != ECONNREFUSED)
				wl_err("worker %d: send on fd %d: %s", c->w->index, c->fd, strerror(errno));
			wl_conn_kill(c);
			return -1;
		}
		WL_COUNT(c->w, bytes_out, (uint64_t)n);
		c->out.off += (size_t)n;
	}
	if (wl_buf_avail(&c->out) == 0)
		wl_buf_trim(&c->out);
	else if (c->out.off >= c->out.len / 2)
		wl_buf_compact(&c->out); /* between whole messages: the only safe place (see wire.c grow) */
	bool want = wl_buf_avail(&c->out) > 0 || c->connecting;
	if (want != c->want_out) {
		c->want_out = want;
		if (wl_poller_mod(&c->w->poller, c->fd, WL_EV_IN | (want ? WL_EV_OUT : 0), c) < 0) {
			wl_conn_kill(c);
			return -1;
		}
	}
	return 0;
}


/* Replies are batched: every reply made while handling one read (or one
 * loop pass) goes out in one send(), so a batch of pipelined requests costs
 * one system call and one segment back, not one each. The batch is flushed
 * after each read, at the end of each loop pass, and before any COMPUTE
 * that takes time, so no reply ever waits for other work. */
void wl_conn_queue_flush(struct wl_conn *c)
{
	struct wl_worker *w = c->w;
	if (c->flush_queued)
		return;
	if (wl_conn_list_push(&w->flushq, &w->nflush, &w->flush_cap, c) < 0) {
		wl_conn_flush(c); /* no room to defer: send now */
		return;
	}
	c->flush_queued = true;
}

int wl_conn_list_push(struct wl_conn ***list, size_t *n, size_t *cap, struct wl_conn *c)
{
	if (wl_grow(list, cap, *n, sizeof(**list), 16) < 0)
		return -1;
	(*list)[(*n)++] = c;
	return 0;
}

void wl_worker_flush(struct wl_worker *w)
{
	/* Killed connections stay allocated until the end of the pass (wl_conn_reap
	 * runs after this), so every queued pointer is still valid here. */
	for (size_t i = 0; i < w->nflush; i++) {
		struct wl_conn *c = w->flushq[i];
		c->flush_queued = false;
		if (!c->dead)
			wl_conn_flush(c);
	}
	w->nflush = 0;
}
