/* worker: one event loop per worker thread. Reads requests off its
 * connections (a stalled one is not read, an oversized request is answered
 * and skipped, a forward target's reply padding is dropped as it arrives),
 * starts a job per request (job.c) and writes replies. A job never blocks
 * the loop except inside COMPUTE, which is the point of COMPUTE. */
#include "worker.h"
#include "flow.h"
#include "spans.h"
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EVENTS 256

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
		wl_span_refused(c, hdr);
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

/* Parse complete messages out of src (the worker's read buffer or the
 * connection's partial-message buffer); false if the connection must close. */
static bool drain_messages(struct wl_conn *c, struct wl_buf *src)
{
	struct wl_worker *w = c->w;
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
		struct wl_hdr hdr;
		const char *why;
		if (wl_decode_hdr(wl_buf_head(src), wl_buf_avail(src), &hdr, &why) < 0) {
			if (!strcmp(why, "oversized"))
				WL_COUNT(w, oversized, 1);
			else
				WL_COUNT(w, malformed, 1);
			return false;
		}
		if (hdr.type != (c->kind == WL_CONN_OUT ? WL_MSG_REPLY : WL_MSG_REQUEST)) {
			WL_COUNT(w, malformed, 1);
			return false;
		}
		if (c->kind == WL_CONN_OUT) {
			if (wl_buf_avail(src) < WL_REPLY_MIN)
				return true;
			outbound_reply(c, src, &hdr);
			continue;
		}
		if (hdr.len > w->node->cfg.max_request_bytes) {
			refuse_long_request(c, src, &hdr);
			continue;
		}
		if (wl_buf_avail(src) < hdr.len)
			return true; /* wait for the rest */
		enum wl_cap cap;
		struct wl_job *j = wl_job_accept(w, wl_buf_head(src), hdr.len, w->trace ? &c->rx_at : NULL, &cap);
		if (!j)
			return false;
		src->off += hdr.len;
		wl_job_start(j, c, cap);
	}
	return true;
}

/* Continue the connections that used up their slice in the previous pass. */
static void run_backlog(struct wl_worker *w)
{
	struct wl_conn *batch[64];
	size_t n = wl_conn_backlog_take(w, batch, 64);
	for (size_t i = 0; i < n; i++) {
		struct wl_conn *c = batch[i];
		c->backlogged = false;
		if (c->dead)
			continue;
		if (!drain_messages(c, &c->in)) {
			wl_conn_kill(c);
			continue;
		}
		if (c->more)
			wl_conn_backlog_add(c);
		else
			wl_conn_trim(c);
	}
}

/* The client sent its last byte: answer what it sent, then close. */
static void on_eof(struct wl_conn *c)
{
	if (c->kind == WL_CONN_OUT) {
		wl_conn_kill(c);
		return;
	}
	wl_flow_set_eof(c);
}

static void on_stream(struct wl_conn *c, uint32_t events)
{
	struct wl_worker *w = c->w;
	if (c->connecting && (events & (WL_EV_OUT | WL_EV_ERR))) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
			wl_conn_kill(c);
			return;
		}
		c->connecting = false;
	}
	if (events & WL_EV_OUT && wl_flow_send(c) < 0)
		return;
	if (!(events & (WL_EV_IN | WL_EV_ERR)))
		return;
	if (c->kind == WL_CONN_IN && (c->stalled || c->eof)) {
		if (events & WL_EV_ERR) /* reset or hung up: nobody will read the replies */
			wl_conn_kill(c);
		return; /* not read until it drains (the event came before the stall) */
	}
	for (;;) {
		bool partial = wl_buf_avail(&c->in) > 0;
		struct wl_buf *dst = partial ? &c->in : &w->rbuf;
		if (wl_buf_reserve(dst, WL_READ_CHUNK) < 0) {
			wl_conn_kill(c);
			return;
		}
		/* Tracing: a request completed by this read starts its serve span when
		 * its last byte arrived; a reply ends its forward.send's network time then. */
		ssize_t n = w->trace ? wl_recv_stamped(c->fd, dst->data + dst->len, dst->cap - dst->len, 0, NULL, NULL,
						       &c->rx_at)
				     : recv(c->fd, dst->data + dst->len, dst->cap - dst->len, 0);
		if (n > 0) {
			WL_COUNT(w, bytes_in, (uint64_t)n);
			dst->len += (size_t)n;
			bool ok = drain_messages(c, dst);
			if (ok && !partial && wl_buf_avail(dst) > 0) { /* keep the unfinished message */
				if (wl_buf_reserve(&c->in, wl_buf_avail(dst)) < 0)
					ok = false;
				else
					wl_put_bytes(&c->in, wl_buf_head(dst), wl_buf_avail(dst));
			}
			w->rbuf.off = w->rbuf.len = 0;
			wl_flow_send_queued(w); /* one send for the replies of everything this read brought */
			if (!ok) {
				wl_conn_kill(c);
				return;
			}
			if (c->dead)
				return;
			wl_conn_trim(c);
			if (c->more) {
				wl_conn_backlog_add(c);
				return; /* the rest waits for the next pass; the socket can wait too */
			}
			if (c->stalled)
				return; /* read again once the backlog drains */
			if ((size_t)n < WL_READ_CHUNK && !partial)
				return; /* drained the socket: skip the EAGAIN round trip */
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n == 0) {
			on_eof(c);
			return;
		}
		if (c->kind == WL_CONN_IN && (wl_buf_avail(&c->in) > 0 || c->skip))
			WL_COUNT(w, truncated, 1); /* reset inside a message */
		wl_conn_kill(c);
		return;
	}
}

static void on_udp(struct wl_conn *c)
{
	static __thread uint8_t dgram[65536];
	struct wl_worker *w = c->w;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		struct sockaddr *from = (struct sockaddr *)&peer;
		struct wl_rx_stamp at;
		ssize_t n = w->trace ? wl_recv_stamped(c->fd, dgram, sizeof(dgram), 0, from, &plen, &at)
				     : recvfrom(c->fd, dgram, sizeof(dgram), 0, from, &plen);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				wl_err("worker %d: recvfrom: %s", w->index, strerror(errno));
			return;
		}
		WL_COUNT(w, bytes_in, (uint64_t)n);
		enum wl_cap cap;
		struct wl_job *j = wl_job_accept(w, dgram, (size_t)n, w->trace ? &at : NULL, &cap);
		if (!j)
			continue; /* a bad datagram is counted and dropped; the socket lives on */
		j->udp_fd = c->fd;
		j->peer = peer;
		j->peerlen = plen;
		/* Datagrams cannot be left unread per sender: over the backlog, ERR. */
		if (cap == WL_CAP_NONE && wl_flow_full(c)) {
			WL_COUNT(w, over_backlog, 1);
			j->reply_len = WL_REPLY_MIN;
			wl_job_finish(j, WL_ST_ERR);
			continue;
		}
		wl_job_start(j, c, cap);
	}
}

/* Tracing: the client's address, for the wl.peer of its requests' spans. A
 * client that is already gone has none to give; its spans go without. */
static void note_peer(struct wl_conn *c)
{
	socklen_t len = sizeof(c->peer.sa);
	c->peer.salen = getpeername(c->fd, (struct sockaddr *)&c->peer.sa, &len) == 0 ? len : 0;
}

static void on_listen(struct wl_conn *c)
{
	struct wl_worker *w = c->w;
	for (;;) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				wl_err("worker %d: accept: %s", w->index, strerror(errno));
			return;
		}
		if (!wl_conn_admit(w)) {
			close(fd); /* over --max-conns: closed at once, before it costs anything */
			continue;
		}
		if (w->node->cfg.nodelay && wl_set_nodelay(fd) < 0) {
			wl_conn_unadmit(w->node);
			close(fd);
			continue;
		}
		struct wl_conn *in = wl_conn_new(w, WL_CONN_IN, fd, WL_EV_IN);
		if (!in) {
			close(fd);
			continue;
		}
		if (w->trace)
			note_peer(in);
		WL_COUNT(w, accepted, 1);
	}
}

static void on_wake(struct wl_worker *w)
{
	int fds[64];
	size_t nfds;
	struct wl_job *jobs = wl_inbox_take(&w->inbox, fds, 64, &nfds);
	for (size_t i = 0; i < nfds; i++) {
		struct wl_conn *in = wl_conn_new(w, WL_CONN_IN, fds[i], WL_EV_IN);
		if (!in) {
			close(fds[i]);
			continue;
		}
		if (w->trace)
			note_peer(in);
		WL_COUNT(w, accepted, 1);
	}
	while (jobs) {
		struct wl_job *j = jobs;
		jobs = j->next;
		if (w->trace)
			wl_span_op(j, j->op_status, wl_realtime_ns());
		wl_job_op_done(j);
	}
}

/* The jobs whose FORWARD a sweep settled (a list through next), in order. */
static void continue_jobs(struct wl_job *jobs)
{
	while (jobs) {
		struct wl_job *j = jobs;
		jobs = j->next;
		wl_job_op_done(j);
	}
}

void *wl_worker_main(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_event evs[MAX_EVENTS];
	uint64_t signal_check_ns = 0, last_event_ns = 0;
	const struct wl_node_cfg *cfg = &w->node->cfg;
	while (!__atomic_load_n(&w->node->stop, __ATOMIC_RELAXED)) {
		uint64_t now = wl_now_ns();
		/* --busy-poll-for: right after traffic more is likely; polling for
		 * it a bounded while saves a wake-up without burning an idle core. */
		bool spin = cfg->busy_poll || now < last_event_ns + cfg->poll_window_ns;
		if (spin)
			wl_spin_check_signals(&signal_check_ns);
		/* Busy polling trades a core for the wakeup latency of a blocking
		 * wait. It yields only for a pending signal: under CFS a yield hands
		 * the core to any neighbour for a whole slice, and the scheduler
		 * preempts a spinner anyway when something else is due. */
		int timeout = spin || w->conns.nbacklog ? 0 : wl_fwd_timeout_ms(w, now);
		uint64_t polled_ns = now;
		int n = wl_poller_wait(&w->poller, evs, MAX_EVENTS, timeout);
		if (n < 0)
			break;
		if (n > 0 && cfg->poll_window_ns)
			last_event_ns = wl_now_ns();
		for (int i = 0; i < n; i++) {
			struct wl_conn *c = evs[i].ptr;
			if (c->dead)
				continue;
			switch (c->kind) {
			case WL_CONN_LISTEN: on_listen(c); break;
			case WL_CONN_UDP: on_udp(c); break;
			case WL_CONN_WAKE: on_wake(w); break;
			case WL_CONN_IN:
			case WL_CONN_OUT: on_stream(c, evs[i].events); break;
			}
		}
		/* Expire only what was overdue before the wait: a reply that arrived
		 * while this worker was busy (in COMPUTE, say) was reported by that
		 * wait and has just been handled, so it is not mistaken for a timeout. */
		if (w->conns.nbacklog)
			run_backlog(w);
		if (w->fwd.inuse)
			continue_jobs(wl_fwd_sweep(w, polled_ns));
		if (w->fwd.nouts)
			wl_fwd_close_idle(w, wl_now_ns());
		wl_flow_send_queued(w);
		wl_fwd_forget_closed(w);
		wl_conn_reap(w);
	}
	return NULL;
}
