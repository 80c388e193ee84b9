/* pair: one sender/receiver thread pair of wl-client. The sender paces and
 * sends on the session's connection; the receiver matches replies to
 * requests by id, applies the request timeout, and fills the pair's
 * histogram; the main thread merges the pairs' histograms after join. */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int send_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* replied: a reply arrived (its latency counts, whatever its status); else the client gave up. */
static void resolve(struct pair *p, uint64_t i, uint8_t status, uint64_t now, bool replied)
{
	struct wl_record *r = &p->recs[i];
	uint64_t send_ns = __atomic_load_n(&r->send_ns, __ATOMIC_ACQUIRE);
	r->latency_ns = now - send_ns;
	r->status = status;
	r->done = 1;
	if (replied)
		wl_hist_add(&p->sum.hist, r->latency_ns);
	p->sum.timeout += status == WL_ST_TIMEOUT;
	p->sum.ok += status == WL_ST_OK;
	p->sum.err += status == WL_ST_ERR;
	if (now > p->sum.last_done_ns)
		p->sum.last_done_ns = now;
	if (p->cl->trace)
		wl_trace_span(p->cl->trace, p->ids[i], p->ids[i] + 16, NULL, "client-request",
			      send_ns + p->cl->rt_offset_ns, now + p->cl->rt_offset_ns, status, NULL);
	if (p->cl->pace_mode == WL_PACE_CLOSED)
		sem_post(&p->window);
}

/* A reply bigger than what has arrived: its bytes are dropped as they come,
 * and the request is resolved when the last one is in, so that the latency
 * of a large reply includes its transfer. */
struct tail {
	uint64_t left, id;
	uint8_t status;
};

static void finish(struct pair *p, uint64_t id, uint8_t status, uint64_t now)
{
	uint64_t i = id & 0xffffffffffull, sent = __atomic_load_n(&p->sent, __ATOMIC_ACQUIRE);
	if (i >= p->lo && i < sent && !p->recs[i].done)
		resolve(p, i, status, now, true);
}

/* Parse replies out of in; large replies are consumed without being kept. */
static void take_replies(struct pair *p, struct wl_buf *in, struct tail *tail, uint64_t now)
{
	while (wl_buf_avail(in) >= WL_REPLY_MIN) {
		struct wl_hdr hdr;
		const char *why;
		if (wl_decode_hdr(wl_buf_head(in), wl_buf_avail(in), &hdr, &why) < 0 || hdr.type != WL_MSG_REPLY) {
			wl_err("pair %d: bad reply from %s: %s", p->index, p->cl->to.text, why);
			in->off = in->len; /* the stream is lost; the session's requests will time out */
			return;
		}
		uint8_t status = wl_reply_status(wl_buf_head(in));
		size_t have = wl_buf_avail(in) < hdr.len ? wl_buf_avail(in) : hdr.len;
		in->off += have;
		if (have < hdr.len) {
			*tail = (struct tail){.left = hdr.len - have, .id = hdr.id, .status = status};
			break;
		}
		finish(p, hdr.id, status, now);
	}
	if (wl_buf_avail(in) == 0)
		in->off = in->len = 0;
}

static uint64_t eff_timeout(struct pair *p)
{
	/* After Ctrl-C, give outstanding replies at most one more second. */
	uint64_t t = p->cl->timeout_ns;
	return __atomic_load_n(&p->cl->stop, __ATOMIC_RELAXED) && t > 1000000000ull ? 1000000000ull : t;
}

static void receive_session(struct pair *p)
{
	struct wl_buf in = {0};
	uint64_t cursor = p->lo;
	struct tail tail = {0};
	bool lost = false, udp = p->cl->to.proto == WL_PROTO_UDP;
	for (;;) {
		uint64_t now = wl_now_ns(), sent = __atomic_load_n(&p->sent, __ATOMIC_ACQUIRE);
		while (cursor < sent) { /* oldest first: deadlines are in send order */
			struct wl_record *r = &p->recs[cursor];
			if (!r->done && lost)
				resolve(p, cursor, WL_ST_ERR, now, false);
			else if (!r->done && now >= __atomic_load_n(&r->send_ns, __ATOMIC_ACQUIRE) + eff_timeout(p))
				resolve(p, cursor, WL_ST_TIMEOUT, now, false);
			else if (!r->done)
				break;
			cursor++;
		}
		int64_t end = __atomic_load_n(&p->sess_end, __ATOMIC_ACQUIRE);
		if (end >= 0 && cursor >= (uint64_t)end)
			break;
		int wait_ms = 20;
		if (cursor < sent) {
			uint64_t due = p->recs[cursor].send_ns + eff_timeout(p);
			wait_ms = due > now ? (int)((due - now) / 1000000 + 1) : 0;
			if (wait_ms > 20)
				wait_ms = 20; /* also notice the sender finishing */
		}
		if (lost) {
			usleep(1000);
			continue;
		}
		struct pollfd pf = {.fd = p->fd, .events = POLLIN};
		/* Busy polling: never sleep in the kernel, yield so a sender on the same core still runs. */
		int rc = poll(&pf, 1, p->cl->busy_poll ? 0 : wait_ms);
		if (rc == 0 && p->cl->busy_poll)
			sched_yield();
		if (rc < 0 && errno != EINTR) {
			wl_err("pair %d: poll: %s", p->index, strerror(errno));
			lost = true;
		}
		if (rc <= 0)
			continue;
		if (wl_buf_reserve(&in, 65536) < 0) {
			lost = true;
			continue;
		}
		ssize_t n = recv(p->fd, in.data + in.len, in.cap - in.len, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR || (udp && errno == ECONNREFUSED)))
			continue;
		if (n <= 0) {
			lost = true; /* the node closed or reset: what is outstanding is ERR */
			continue;
		}
		if (tail.left) {
			uint64_t drop = (uint64_t)n < tail.left ? (uint64_t)n : tail.left;
			tail.left -= drop;
			memmove(in.data + in.len, in.data + in.len + drop, (size_t)n - drop);
			n -= (ssize_t)drop;
			if (tail.left == 0)
				finish(p, tail.id, tail.status, wl_now_ns());
		}
		in.len += (size_t)n;
		take_replies(p, &in, &tail, wl_now_ns());
		if (udp) { /* one datagram, one reply */
			in.off = in.len = 0;
			tail.left = 0;
		}
	}
	wl_buf_free(&in);
}

void *wl_receiver_main(void *arg)
{
	struct pair *p = arg;
	for (;;) {
		while (sem_wait(&p->ready) < 0 && errno == EINTR)
			;
		if (p->finished)
			return NULL;
		receive_session(p);
		sem_post(&p->done);
	}
}

void *wl_sender_main(void *arg)
{
	struct pair *p = arg;
	struct client *cl = p->cl;
	struct wl_pace pace;
	struct wl_buf buf = {0};
	if (cl->ncpus) {
		char who[32];
		snprintf(who, sizeof(who), "pair %d", p->index);
		wl_pin_thread(cl->cpus[p->index % cl->ncpus], who);
	}
	wl_pace_init(&pace, cl->pace_mode, &cl->pace_value, cl->rss_ns, cl->spin);
	for (uint64_t s = 0; s < cl->nsessions && !cl->stop; s++) {
		uint64_t lo = cl->nreq * s / cl->nsessions, hi = cl->nreq * (s + 1) / cl->nsessions;
		if (lo == hi)
			continue;
		int fd = wl_connect(&cl->to, false, cl->nodelay);
		if (fd < 0) { /* the node is unreachable: this session's requests are ERR */
			for (uint64_t i = lo; i < hi; i++) {
				p->recs[i].send_ns = wl_now_ns();
				p->recs[i].session = (uint32_t)s;
				p->recs[i].status = WL_ST_ERR;
				p->sum.err++;
			}
			__atomic_store_n(&p->sent, hi, __ATOMIC_RELEASE);
			continue;
		}
		p->fd = fd;
		p->lo = lo;
		p->hi = hi;
		__atomic_store_n(&p->sess_end, -1, __ATOMIC_RELEASE);
		sem_post(&p->ready);
		uint64_t i;
		for (i = lo; i < hi && !__atomic_load_n(&cl->stop, __ATOMIC_RELAXED); i++) {
			if (cl->pace_mode == WL_PACE_CLOSED)
				while (sem_wait(&p->window) < 0 && errno == EINTR)
					;
			wl_sleep_until(wl_pace_next(&pace, cl->start_ns, &p->rng), cl->spin);
			buf.len = buf.off = 0;
			const uint8_t *tid = NULL, *sid = NULL;
			if (cl->trace) {
				wl_trace_new_id(p->ids[i], 24);
				tid = p->ids[i];
				sid = p->ids[i] + 16;
			}
			if (wl_workload_encode(&cl->wk, &buf, (uint64_t)p->index << 40 | i, tid, sid, &p->rng) < 0) {
				__atomic_store_n(&cl->stop, 1, __ATOMIC_RELAXED);
				break;
			}
			p->recs[i].session = (uint32_t)s;
			p->recs[i].status = 0;
			__atomic_store_n(&p->recs[i].send_ns, wl_now_ns(), __ATOMIC_RELEASE);
			__atomic_store_n(&p->sent, i + 1, __ATOMIC_RELEASE);
			if (send_all(fd, buf.data, buf.len) < 0) {
				i++; /* the receiver sees the broken connection and marks ERR */
				break;
			}
		}
		__atomic_store_n(&p->sess_end, (int64_t)i, __ATOMIC_RELEASE);
		while (sem_wait(&p->done) < 0 && errno == EINTR)
			;
		if (close(fd) < 0)
			wl_err("pair %d: close: %s", p->index, strerror(errno));
	}
	wl_buf_free(&buf);
	p->finished = true;
	sem_post(&p->ready);
	return NULL;
}

