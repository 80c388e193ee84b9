/* conn: a worker's connections: registration in its poller, deferred
 * close, buffered sends, and backpressure: a client connection that holds
 * --max-backlog bytes (unsent replies, unfinished requests) is not read
 * until it drains, so a client that never reads cannot grow the node. */
#include "conn.h"
#include "forward.h"
#include "worker.h"

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

/* A client connection over --max-conns is refused (the caller closes it):
 * a flood of connections meets a counted cap, not EMFILE. */
bool wl_conn_admit(struct wl_worker *w)
{
	struct wl_node *node = w->node;
	if ((uint64_t)__atomic_add_fetch(&node->nconns, 1, __ATOMIC_RELAXED) <= node->cfg.max_conns)
		return true;
	__atomic_fetch_sub(&node->nconns, 1, __ATOMIC_RELAXED);
	WL_COUNT(w, over_conns, 1);
	return false;
}

void wl_conn_unadmit(struct wl_node *node) { __atomic_fetch_sub(&node->nconns, 1, __ATOMIC_RELAXED); }

static struct wl_conn *conn_alloc(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		wl_err("worker %d: out of memory for a connection", w->index);
		return NULL;
	}
	c->kind = kind;
	c->fd = fd;
	c->w = w;
	c->events = events;
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

struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events)
{
	struct wl_conn *c = conn_alloc(w, kind, fd, events);
	if (!c && kind == WL_CONN_IN)
		wl_conn_unadmit(w->node);
	/* Tracing: a serve starts, and a forward.send's reply is timed, at the
	 * kernel's receive (rxstamp.h); refused, at the read. */
	if (c && w->trace && kind != WL_CONN_LISTEN)
		wl_rxstamp_enable(fd);
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
	if (c->kind == WL_CONN_IN) {
		WL_COUNT(w, closed, 1);
		wl_conn_unadmit(w->node);
	}
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
		wl_outq_free(&c->out);
		free(c);
	}
}

/* A stalled or half-closed client connection is not read; an outbound one
 * always is (replies free the node's pending forwards). */
static int set_interest(struct wl_conn *c)
{
	bool read = c->kind != WL_CONN_IN || !(c->stalled || c->eof);
	uint32_t ev = (read ? WL_EV_IN : 0) | (c->want_out ? WL_EV_OUT : 0);
	if (ev == c->events)
		return 0;
	if (wl_poller_mod(&c->w->poller, c->fd, ev, c) < 0) {
		wl_conn_kill(c);
		return -1;
	}
	c->events = ev;
	return 0;
}

int wl_conn_flush(struct wl_conn *c)
{
	while (!wl_outq_empty(&c->out) && !c->connecting) {
		ssize_t n = wl_outq_send(&c->out, c->fd);
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
	}
	wl_outq_trim(&c->out); /* between whole messages: the only safe place (see wire.c grow) */
	c->want_out = !wl_outq_empty(&c->out) || c->connecting;
	if (set_interest(c) < 0)
		return -1;
	wl_conn_progress(c);
	return c->dead ? -1 : 0;
}

void wl_conn_put_reply(struct wl_conn *c, uint64_t id, const uint8_t trace_id[16], uint8_t status, uint32_t reply_len)
{
	struct wl_buf *b = &c->out.data;
	size_t at = wl_put_hdr(b, WL_MSG_REPLY, id, trace_id, NULL);
	wl_put_u8(b, status);
	wl_put_zeros(b, 3);
	uint32_t total = reply_len > WL_REPLY_MIN ? reply_len : WL_REPLY_MIN;
	wl_patch_u32(b, at + 8, total);
	wl_outq_zeros(&c->out, total - WL_REPLY_MIN);
}

bool wl_conn_full(const struct wl_conn *c)
{
	return wl_outq_mem(&c->out) + c->held >= c->w->node->cfg.max_backlog_bytes;
}

void wl_conn_stall(struct wl_conn *c)
{
	if (c->stalled)
		return;
	c->stalled = true;
	WL_COUNT(c->w, paused, 1);
	set_interest(c);
}

void wl_conn_set_eof(struct wl_conn *c)
{
	c->eof = true;
	if (set_interest(c) == 0)
		wl_conn_progress(c);
}

/* Does in hold a message the connection has yet to deal with? A bad header
 * counts: draining it is what closes the connection. */
static bool has_message(const struct wl_conn *c)
{
	struct wl_hdr hdr;
	const char *why;
	if (c->skip || wl_buf_avail(&c->in) < WL_HDR_LEN)
		return false;
	if (wl_decode_hdr(wl_buf_head(&c->in), wl_buf_avail(&c->in), &hdr, &why) < 0)
		return true;
	return wl_buf_avail(&c->in) >= hdr.len || hdr.len > c->w->node->cfg.max_request_bytes;
}

void wl_conn_progress(struct wl_conn *c)
{
	if (c->dead || c->kind != WL_CONN_IN)
		return;
	if (c->stalled && !wl_conn_full(c)) {
		c->stalled = false;
		if (set_interest(c) < 0)
			return;
		if (wl_buf_avail(&c->in) > 0)
			wl_worker_backlog_add(c); /* requests read before the stall go first */
	}
	if (c->eof && !c->stalled && !c->backlogged && c->held == 0 && wl_outq_empty(&c->out) && !has_message(c)) {
		/* everything received has been answered; what is left is part of a message */
		if (wl_buf_avail(&c->in) > 0 || c->skip)
			WL_COUNT(c->w, truncated, 1);
		wl_conn_kill(c);
	}
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
