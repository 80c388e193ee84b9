/* flow: what goes out on a connection and how fast requests may come in
 * (see flow.h). */
#include "flow.h"
#include "worker.h"

#include <errno.h>
#include <string.h>

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

int wl_flow_send(struct wl_conn *c)
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
	wl_flow_progress(c);
	return c->dead ? -1 : 0;
}

void wl_flow_put_reply(struct wl_conn *c, uint64_t id, const uint8_t trace_id[16], uint8_t status, uint32_t reply_len)
{
	struct wl_buf *b = &c->out.data;
	size_t at = wl_put_hdr(b, WL_MSG_REPLY, id, trace_id, NULL);
	wl_put_u8(b, status);
	wl_put_zeros(b, 3);
	uint32_t total = reply_len > WL_REPLY_MIN ? reply_len : WL_REPLY_MIN;
	wl_patch_u32(b, at + 8, total);
	wl_outq_zeros(&c->out, total - WL_REPLY_MIN);
}

bool wl_flow_full(const struct wl_conn *c)
{
	return wl_outq_mem(&c->out) + c->held >= c->w->node->cfg.max_backlog_bytes;
}

void wl_flow_stall(struct wl_conn *c)
{
	if (c->stalled)
		return;
	c->stalled = true;
	WL_COUNT(c->w, paused, 1);
	set_interest(c);
}

void wl_flow_set_eof(struct wl_conn *c)
{
	c->eof = true;
	if (set_interest(c) == 0)
		wl_flow_progress(c);
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

void wl_flow_progress(struct wl_conn *c)
{
	if (c->dead || c->kind != WL_CONN_IN)
		return;
	if (c->stalled && !wl_flow_full(c)) {
		c->stalled = false;
		if (set_interest(c) < 0)
			return;
		if (wl_buf_avail(&c->in) > 0)
			wl_conn_backlog_add(c); /* requests read before the stall go first */
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
void wl_flow_queue(struct wl_conn *c)
{
	struct wl_flow *q = &c->w->flow;
	if (c->flush_queued)
		return;
	if (wl_grow(&q->queue, &q->cap, q->n, sizeof(*q->queue), 16) < 0) {
		wl_flow_send(c); /* no room to defer: send now */
		return;
	}
	q->queue[q->n++] = c;
	c->flush_queued = true;
}

void wl_flow_send_queued(struct wl_worker *w)
{
	/* Killed connections stay allocated until the end of the pass (wl_conn_reap
	 * runs after this), so every queued pointer is still valid here. */
	struct wl_flow *q = &w->flow;
	for (size_t i = 0; i < q->n; i++) {
		struct wl_conn *c = q->queue[i];
		c->flush_queued = false;
		if (!c->dead)
			wl_flow_send(c);
	}
	q->n = 0;
}
