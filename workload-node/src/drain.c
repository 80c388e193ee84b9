/* drain: the messages in what a connection has read (see drain.h). */
#include "drain.h"
#include "flow.h"
#include "spans.h"
#include "worker.h"

#include <string.h>

enum take { TAKE_NEXT, TAKE_WAIT, TAKE_CLOSE }; /* after a message: the next one, wait for bytes, close */

/* Drop what is left of a message already dealt with (a reply's padding, an
 * oversized request); true when there is nothing more to drop. */
static bool skip_bytes(struct wl_conn *c, struct wl_buf *src)
{
	size_t n = wl_buf_avail(src) < c->skip ? wl_buf_avail(src) : (size_t)c->skip;
	src->off += n;
	c->skip -= n;
	return c->skip == 0;
}

/* A reply from a forward target: only its header and status matter, so
 * its padding is dropped as it arrives instead of being buffered. */
static void outbound_reply(struct wl_conn *c, struct wl_buf *src, const struct wl_hdr *hdr)
{
	struct wl_job *settled =
	    wl_fwd_on_reply(c->w, wl_buf_head(src), WL_REPLY_MIN, c->w->trace ? c->rx_at.kernel_rt_ns : 0);
	if (settled)
		wl_job_op_done(settled);
	size_t have = wl_buf_avail(src) < hdr->len ? wl_buf_avail(src) : hdr->len;
	src->off += have;
	c->skip = hdr->len - have;
}

/* A request longer than --max-request is answered ERR and dropped unread. */
static void refuse_long_request(struct wl_conn *c, struct wl_buf *src, const struct wl_hdr *hdr)
{
	WL_COUNT(c->w, requests, 1);
	WL_COUNT(c->w, over_request, 1);
	WL_COUNT(c->w, replies, 1);
	if (c->w->trace)
		wl_spans_refused(c, hdr);
	wl_flow_put_reply(c, hdr->id, hdr->trace_id, WL_ST_ERR, WL_REPLY_MIN);
	wl_flow_queue(c);
	size_t have = wl_buf_avail(src) < hdr->len ? wl_buf_avail(src) : hdr->len;
	src->off += have;
	c->skip = hdr->len - have;
}

/* A client connection over its backlog is not read any further; first give
 * the socket what it takes now, the client may well be reading. */
static bool must_stall(struct wl_conn *c)
{
	if (!wl_flow_full(c))
		return false;
	if (!wl_outq_empty(&c->out) && wl_flow_send(c) < 0)
		return true; /* gone */
	if (!wl_flow_full(c))
		return false;
	wl_flow_stall(c);
	return true;
}

/* The message at the head of src: a forward target's reply, a request to
 * start, or one refused unread. */
static enum take take_message(struct wl_conn *c, struct wl_buf *src)
{
	struct wl_worker *w = c->w;
	struct wl_hdr hdr;
	const char *why;
	if (wl_decode_hdr(wl_buf_head(src), wl_buf_avail(src), &hdr, &why) < 0) {
		if (!strcmp(why, "oversized"))
			WL_COUNT(w, oversized, 1);
		else
			WL_COUNT(w, malformed, 1);
		return TAKE_CLOSE;
	}
	if (hdr.type != (c->kind == WL_CONN_OUT ? WL_MSG_REPLY : WL_MSG_REQUEST)) {
		WL_COUNT(w, malformed, 1);
		return TAKE_CLOSE;
	}
	if (c->kind == WL_CONN_OUT) {
		if (wl_buf_avail(src) < WL_REPLY_MIN)
			return TAKE_WAIT;
		outbound_reply(c, src, &hdr);
		return TAKE_NEXT;
	}
	if (hdr.len > w->node->cfg.max_request_bytes) {
		refuse_long_request(c, src, &hdr);
		return TAKE_NEXT;
	}
	if (wl_buf_avail(src) < hdr.len)
		return TAKE_WAIT; /* wait for the rest */
	enum wl_cap cap;
	struct wl_job *j = wl_job_accept(w, wl_buf_head(src), hdr.len, w->trace ? &c->rx_at : NULL, &cap);
	if (!j)
		return TAKE_CLOSE;
	src->off += hdr.len;
	wl_job_start(j, c, cap);
	return TAKE_NEXT;
}

bool wl_drain(struct wl_conn *c, struct wl_buf *src)
{
	uint64_t start = wl_now_ns();
	c->more = false;
	while (!c->dead && wl_buf_avail(src) > 0) {
		if (c->skip && !skip_bytes(c, src))
			return true;
		if (wl_buf_avail(src) < WL_HDR_LEN)
			return true;
		/* A connection gets a time slice per pass: requests queued behind a
		 * long COMPUTE wait for the next pass, so forward replies and other
		 * connections are served in between instead of starving. */
		if (c->kind == WL_CONN_IN && wl_now_ns() - start > WL_SLICE_NS) {
			c->more = true;
			return true;
		}
		if (c->kind == WL_CONN_IN && must_stall(c))
			return true;
		enum take next = take_message(c, src);
		if (next != TAKE_NEXT)
			return next == TAKE_WAIT;
	}
	return true;
}
