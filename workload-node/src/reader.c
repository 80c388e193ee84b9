/* reader: what a worker reads off its sockets (see reader.h). */
#include "reader.h"
#include "drain.h"
#include "flow.h"
#include "worker.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

void wl_reader_backlog(struct wl_worker *w)
{
	struct wl_conn *batch[64];
	size_t n = wl_conn_backlog_take(w, batch, 64);
	for (size_t i = 0; i < n; i++) {
		struct wl_conn *c = batch[i];
		c->backlogged = false;
		if (c->dead)
			continue;
		if (!wl_drain(c, &c->in)) {
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

/* A connect() in progress has ended: false (the connection closed) if it failed. */
static bool connected(struct wl_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		wl_conn_kill(c);
		return false;
	}
	c->connecting = false;
	return true;
}

/* What one read brought into dst: its messages taken, an unfinished one
 * kept by the connection, the replies sent. True to read again. */
static bool took_bytes(struct wl_conn *c, struct wl_buf *dst, size_t n, bool partial)
{
	struct wl_worker *w = c->w;
	WL_COUNT(w, bytes_in, (uint64_t)n);
	dst->len += n;
	bool ok = wl_drain(c, dst);
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
		return false;
	}
	if (c->dead)
		return false;
	wl_conn_trim(c);
	if (c->more) {
		wl_conn_backlog_add(c);
		return false; /* the rest waits for the next pass; the socket can wait too */
	}
	if (c->stalled)
		return false; /* read again once the backlog drains */
	return n >= WL_READ_CHUNK || partial; /* a short read drained the socket: no EAGAIN round trip */
}

/* One read of a stream connection; true to read again. */
static bool read_once(struct wl_conn *c)
{
	struct wl_worker *w = c->w;
	bool partial = wl_buf_avail(&c->in) > 0;
	struct wl_buf *dst = partial ? &c->in : &w->rbuf;
	if (wl_buf_reserve(dst, WL_READ_CHUNK) < 0) {
		wl_conn_kill(c);
		return false;
	}
	/* Tracing: a request completed by this read starts its serve span when
	 * its last byte arrived; a reply ends its forward.send's network time then. */
	ssize_t n = w->trace ? wl_recv_stamped(c->fd, dst->data + dst->len, dst->cap - dst->len, 0, NULL, NULL,
					       &c->rx_at)
			     : recv(c->fd, dst->data + dst->len, dst->cap - dst->len, 0);
	if (n > 0)
		return took_bytes(c, dst, (size_t)n, partial);
	if (n < 0 && errno == EINTR)
		return true;
	if (n < 0 && errno == EAGAIN)
		return false;
	if (n == 0) {
		on_eof(c);
		return false;
	}
	if (c->kind == WL_CONN_IN && (wl_buf_avail(&c->in) > 0 || c->skip))
		WL_COUNT(w, truncated, 1); /* reset inside a message */
	wl_conn_kill(c);
	return false;
}

void wl_reader_stream(struct wl_conn *c, uint32_t events)
{
	if (c->connecting && (events & (WL_EV_OUT | WL_EV_ERR)) && !connected(c))
		return;
	if (events & WL_EV_OUT && wl_flow_send(c) < 0)
		return;
	if (!(events & (WL_EV_IN | WL_EV_ERR)))
		return;
	if (c->kind == WL_CONN_IN && (c->stalled || c->eof)) {
		if (events & WL_EV_ERR) /* reset or hung up: nobody will read the replies */
			wl_conn_kill(c);
		return; /* not read until it drains (the event came before the stall) */
	}
	while (read_once(c))
		;
}

void wl_reader_udp(struct wl_conn *c)
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
