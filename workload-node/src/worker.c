/* worker: one event loop per worker thread. Reads requests, validates them,
 * runs each request's chain as a job, parks jobs on storage and forwards,
 * and writes replies. A job never blocks the loop except inside COMPUTE,
 * which is the point of COMPUTE. */
#include "node.h"
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EVENTS 256

void wl_job_finish(struct wl_job *j, uint8_t status)
{
	struct wl_worker *w = j->w;
	struct wl_conn *c = j->conn_slot < w->nconns ? w->conns[j->conn_slot] : NULL;
	if (w->trace)
		wl_trace_span(w->trace, j->trace_id, j->span_id, j->parent_span, "request", j->start_rt_ns,
			      wl_realtime_ns(), status, NULL);
	if (j->udp_fd >= 0) {
		struct wl_buf b = {0};
		/* A datagram carries at most 64 KiB: a larger reply size is an error reply. */
		uint32_t len = j->reply_len > 65000 ? WL_REPLY_MIN : j->reply_len;
		wl_put_reply(&b, j->id, j->trace_id, j->reply_len > 65000 ? WL_ST_ERR : status, len);
		if (wl_enc_ok(&b) == 0 &&
		    sendto(j->udp_fd, b.data, b.len, 0, (struct sockaddr *)&j->udp_peer, j->udp_peerlen) < 0)
			wl_err("worker %d: udp reply: %s", w->index, strerror(errno));
		else
			WL_COUNT(w, bytes_out, b.len);
		wl_buf_free(&b);
		WL_COUNT(w, replies, 1);
	} else if (c && c->gen == j->conn_gen && !c->dead) {
		wl_put_reply(&c->out, j->id, j->trace_id, status, j->reply_len);
		if (wl_enc_ok(&c->out) < 0) { /* a half-written reply would corrupt the stream */
			wl_err("worker %d: out of memory for a %u-byte reply", w->index, j->reply_len);
			wl_conn_kill(c);
		} else {
			WL_COUNT(w, replies, 1);
			wl_conn_queue_flush(c);
		}
	}
	free(j->msg);
	free(j);
}

static void op_span(struct wl_job *j, const char *name, uint64_t start, const char *attrs)
{
	uint8_t sid[8];
	wl_trace_new_id(sid, 8);
	wl_trace_span(j->w->trace, j->trace_id, sid, j->span_id, name, start, wl_realtime_ns(), 0, attrs);
}

void wl_job_resume(struct wl_job *j)
{
	const char *why;
	for (;;) {
		int rc = wl_chain_next(&j->cur, &j->op, &why);
		if (rc <= 0) { /* validated on receipt, so rc < 0 means a bug: say ERR */
			wl_job_finish(j, rc == 0 ? WL_ST_OK : WL_ST_ERR);
			return;
		}
		uint64_t t0 = j->w->trace ? wl_realtime_ns() : 0;
		switch (j->op.kind) {
		case WL_OP_COMPUTE:
			wl_compute(j->w, &j->op);
			if (j->w->trace)
				op_span(j, "COMPUTE", t0, NULL);
			break;
		case WL_OP_SKIP: {
			unsigned count = j->op.skip.draw < j->op.skip.threshold ? j->op.skip.count : 0;
			for (unsigned i = 0; i < count; i++) /* j->op is overwritten: count was copied */
				if (wl_chain_next(&j->cur, &j->op, &why) <= 0)
					break;
			break;
		}
		case WL_OP_LOAD:
		case WL_OP_STORE:
			j->op_start_rt_ns = t0;
			wl_storage_submit(j->w->node->storage, j);
			return;
		case WL_OP_FORWARD:
			j->op_start_rt_ns = t0;
			wl_fwd_start(j);
			return;
		}
	}
}

static struct wl_job *job_new(struct wl_worker *w, const uint8_t *msg, size_t used, const struct wl_hdr *hdr)
{
	struct wl_job *j = calloc(1, sizeof(*j));
	uint8_t *copy = malloc(used); /* padding after the chain is not kept */
	if (!j || !copy) {
		wl_err("worker %d: out of memory for a %zu-byte request", w->index, used);
		free(j);
		free(copy);
		return NULL;
	}
	memcpy(copy, msg, used);
	j->w = w;
	j->msg = copy;
	j->id = hdr->id;
	j->udp_fd = -1;
	j->conn_slot = UINT32_MAX;
	memcpy(j->trace_id, hdr->trace_id, 16);
	memcpy(j->parent_span, hdr->parent_span, 8);
	if (w->trace) {
		j->start_rt_ns = wl_realtime_ns();
		wl_trace_new_id(j->span_id, 8);
	}
	wl_request_chain(copy, used, &j->reply_len, &j->cur);
	return j;
}

/* Check one complete message; on any defect count it and return NULL. */
static struct wl_job *accept_request(struct wl_worker *w, const uint8_t *msg, size_t len)
{
	const char *why;
	size_t used;
	struct wl_hdr hdr;
	if (wl_validate_request(msg, len, &why, &used) < 0) {
		WL_COUNT(w, malformed, 1);
		return NULL;
	}
	wl_decode_hdr(msg, len, &hdr, &why);
	WL_COUNT(w, requests, 1);
	return job_new(w, msg, used, &hdr);
}

/* Parse complete messages out of src (the worker's read buffer or the
 * connection's partial-message buffer); false if the connection must close. */
static bool drain_messages(struct wl_conn *c, struct wl_buf *src)
{
	struct wl_worker *w = c->w;
	uint64_t start = wl_now_ns();
	c->more = false;
	while (!c->dead && wl_buf_avail(src) >= WL_HDR_LEN) {
		/* A connection gets a time slice per pass: requests queued behind a
		 * long COMPUTE wait for the next pass, so forward replies and other
		 * connections are served in between instead of starving. */
		if (c->kind == WL_CONN_IN && wl_now_ns() - start > WL_SLICE_NS) {
			c->more = true;
			return true;
		}
		struct wl_hdr hdr;
		const char *why;
		if (wl_decode_hdr(wl_buf_head(src), wl_buf_avail(src), &hdr, &why) < 0) {
			if (!strcmp(why, "oversized"))
				WL_COUNT(w, oversized, 1);
			else
				WL_COUNT(w, malformed, 1);
			return false;
		}
		if (wl_buf_avail(src) < hdr.len)
			return true; /* wait for the rest */
		const uint8_t *msg = wl_buf_head(src);
		if (c->kind == WL_CONN_OUT) {
			if (hdr.type != WL_MSG_REPLY) {
				WL_COUNT(w, malformed, 1);
				return false;
			}
			src->off += hdr.len;
			wl_fwd_on_reply(w, msg, hdr.len);
			continue;
		}
		struct wl_job *j = hdr.type == WL_MSG_REQUEST ? accept_request(w, msg, hdr.len) : NULL;
		if (!j) {
			if (hdr.type != WL_MSG_REQUEST)
				WL_COUNT(w, malformed, 1);
			return false;
		}
		j->conn_slot = c->slot;
		j->conn_gen = c->gen;
		src->off += hdr.len;
		wl_job_resume(j);
	}
	return true;
}

static void backlog_add(struct wl_conn *c)
{
	struct wl_worker *w = c->w;
	if (c->backlogged)
		return;
	if (wl_conn_list_push(&w->backlog, &w->nbacklog, &w->backlog_cap, c) < 0) {
		wl_err("worker %d: out of memory for the backlog", w->index);
		wl_conn_kill(c);
		return;
	}
	c->backlogged = true;
}

/* Continue the connections that used up their slice in the previous pass. */
static void run_backlog(struct wl_worker *w)
{
	size_t n = w->nbacklog;
	struct wl_conn *batch[64];
	if (n > 64)
		n = 64;
	memcpy(batch, w->backlog, n * sizeof(*batch));
	memmove(w->backlog, w->backlog + n, (w->nbacklog - n) * sizeof(*batch));
	w->nbacklog -= n;
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
			backlog_add(c);
		else
			wl_buf_trim(&c->in);
	}
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
		wl_fwd_outbound_ready(c);
	}
	if (events & WL_EV_OUT && wl_conn_flush(c) < 0)
		return;
	if (!(events & (WL_EV_IN | WL_EV_ERR)))
		return;
	for (;;) {
		bool partial = wl_buf_avail(&c->in) > 0;
		struct wl_buf *dst = partial ? &c->in : &w->rbuf;
		if (wl_buf_reserve(dst, WL_READ_CHUNK) < 0) {
			wl_conn_kill(c);
			return;
		}
		ssize_t n = recv(c->fd, dst->data + dst->len, dst->cap - dst->len, 0);
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
			wl_worker_flush(w); /* one send for the replies of everything this read brought */
			if (!ok) {
				wl_conn_kill(c);
				return;
			}
			if (c->dead)
				return;
			wl_buf_trim(&c->in);
			if (c->more) {
				backlog_add(c);
				return; /* the rest waits for the next pass; the socket can wait too */
			}
			if ((size_t)n < WL_READ_CHUNK && !partial)
				return; /* drained the socket: skip the EAGAIN round trip */
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		/* EOF or error: finish the requests already queued, then a partial
		 * message left behind is a truncated request. */
		while (c->more && !c->dead && drain_messages(c, &c->in))
			;
		if (c->dead)
			return;
		if (wl_buf_avail(&c->in) > 0 && c->kind == WL_CONN_IN)
			WL_COUNT(w, truncated, 1);
		wl_conn_kill(c);
		return;
	}
}

static void on_udp(struct wl_conn *c)
{
	static __thread uint8_t dgram[65536];
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		ssize_t n = recvfrom(c->fd, dgram, sizeof(dgram), 0, (struct sockaddr *)&peer, &plen);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				wl_err("worker %d: recvfrom: %s", c->w->index, strerror(errno));
			return;
		}
		WL_COUNT(c->w, bytes_in, (uint64_t)n);
		struct wl_job *j = accept_request(c->w, dgram, (size_t)n);
		if (!j)
			continue; /* a bad datagram is counted and dropped; the socket lives on */
		j->udp_fd = c->fd;
		j->udp_peer = peer;
		j->udp_peerlen = plen;
		wl_job_resume(j);
	}
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
		if (w->node->cfg.nodelay && wl_set_nodelay(fd) < 0) {
			close(fd);
			continue;
		}
		if (!wl_conn_new(w, WL_CONN_IN, fd, WL_EV_IN)) {
			close(fd);
			continue;
		}
		WL_COUNT(w, accepted, 1);
	}
}

void wl_worker_post_done(struct wl_worker *w, struct wl_job *job)
{
	uint64_t one = 1;
	pthread_mutex_lock(&w->lock);
	job->next = NULL;
	if (w->done_tail)
		w->done_tail->next = job;
	else
		w->done_head = job;
	w->done_tail = job;
	pthread_mutex_unlock(&w->lock);
	if (write(w->wake.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		wl_err("worker %d: eventfd write: %s", w->index, strerror(errno));
}

static void on_wake(struct wl_worker *w)
{
	uint64_t v;
	if (read(w->wake.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		wl_err("worker %d: eventfd read: %s", w->index, strerror(errno));
	pthread_mutex_lock(&w->lock);
	struct wl_job *jobs = w->done_head;
	w->done_head = w->done_tail = NULL;
	int fds[64];
	size_t nfds = 0;
	while (w->nhandoff > 0 && nfds < 64)
		fds[nfds++] = w->handoff[--w->nhandoff];
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; i < nfds; i++) {
		if (!wl_conn_new(w, WL_CONN_IN, fds[i], WL_EV_IN))
			close(fds[i]);
		else
			WL_COUNT(w, accepted, 1);
	}
	if (nfds == 64 && write(w->wake.fd, &(uint64_t){1}, 8) < 0)
		wl_err("worker %d: eventfd rewake: %s", w->index, strerror(errno));
	while (jobs) {
		struct wl_job *j = jobs;
		jobs = j->next;
		if (w->trace)
			op_span(j, j->op.kind == WL_OP_LOAD ? "LOAD" : "STORE", j->op_start_rt_ns, NULL);
		if (j->storage_rc < 0)
			wl_job_finish(j, WL_ST_ERR);
		else
			wl_job_resume(j);
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
		int timeout = spin || w->nbacklog ? 0 : wl_fwd_timeout_ms(w, now);
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
		if (w->nbacklog)
			run_backlog(w);
		if (w->pend_inuse)
			wl_fwd_sweep(w, polled_ns);
		wl_worker_flush(w);
		wl_conn_reap(w);
	}
	return NULL;
}
