/* pair: the two-thread pair of wl-client, for open-loop runs with blocking
 * waits: the sender sleeps until each request is due and sends it; the
 * receiver blocks in recv and matches replies (replies.c). The main thread
 * merges the pairs' histograms after join. Closed-loop and busy-polling
 * pairs run as one thread instead (solo.c) and share the sending code here. */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* At most this many due requests go out in one send(). */
#define SEND_BATCH_MAX 64
#define SEND_BATCH_BYTES 65536

bool wl_pair_solo(const struct client *cl) { return cl->busy_poll || cl->pace_mode == WL_PACE_CLOSED; }

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

/* The session's connection; if the node is unreachable, the session's requests are ERR. */
static int pair_connect(struct pair *p, uint64_t lo, uint64_t hi, uint32_t session)
{
	int fd = wl_session_connect(p, session);
	if (fd >= 0 && p->cl->trace)
		wl_rxstamp_enable(fd); /* a request's span tells when its reply arrived (replies.c) */
	if (fd >= 0)
		return fd;
	for (uint64_t i = lo; i < hi; i++) {
		p->recs[i].send_ns = wl_now_ns();
		p->recs[i].session = session;
		p->recs[i].status = WL_ST_ERR;
		__atomic_store_n(&p->recs[i].done, 1, __ATOMIC_RELEASE); /* resolved: collect.c may write it */
		if (p->cl->trace)
			wl_rx_span_unsent(p, i);
		p->sum.err++;
	}
	__atomic_store_n(&p->sent, hi, __ATOMIC_RELEASE);
	return -1;
}

/* Send request i, whose due time has come, and in open loop over TCP every
 * later request of the session that is already due too, in one send(): a sender
 * that woke late (timer slack, preemption) catches up with one system call
 * and one TCP segment instead of a burst of them. Requests sent together
 * share their send time; latency always runs from the actual send.
 * Returns the index after the last request sent. */
uint64_t wl_pair_send(struct pair *p, struct wl_sendq *q, int fd, uint64_t i, uint64_t hi, uint32_t session,
		      bool *broken)
{
	struct client *cl = p->cl;
	uint64_t first = i;
	uint64_t due[SEND_BATCH_MAX];
	q->buf.len = q->buf.off = 0;
	q->buf.oom = false;
	for (;;) {
		size_t mark = q->buf.len;
		const uint8_t *tid = NULL, *sid = NULL;
		if (cl->trace) {
			wl_trace_new_id(p->ids[i].trace_id, 16);
			wl_trace_new_id(p->ids[i].span_id, 8);
			tid = p->ids[i].trace_id;
			sid = p->ids[i].span_id;
		}
		due[i - first] = q->due;
		q->have_due = false;
		if (wl_workload_encode(&cl->wk, &q->buf, (uint64_t)p->index << 40 | i, tid, sid, &p->rng) < 0) {
			q->buf.len = mark; /* a half-encoded request never goes out */
			__atomic_store_n(&cl->stop, 1, __ATOMIC_RELAXED);
			break;
		}
		p->recs[i].session = session;
		p->recs[i].status = 0;
		if (cl->trace)
			p->ids[i].req_bytes = (uint32_t)(q->buf.len - mark);
		i++;
		/* UDP: a datagram is one request, never a batch */
		if (i == hi || cl->pace_mode == WL_PACE_CLOSED || cl->to.proto == WL_PROTO_UDP ||
		    i - first == SEND_BATCH_MAX || q->buf.len >= SEND_BATCH_BYTES)
			break;
		q->due = wl_pace_next(&q->pace, cl->start_ns, &p->rng);
		q->have_due = true;
		if (q->due > wl_now_ns())
			break;
	}
	if (i == first)
		return i;
	uint64_t now = wl_now_ns();
	bool open = cl->pace_mode != WL_PACE_CLOSED;
	for (uint64_t k = first; k < i; k++) {
		uint64_t late = open && now > due[k - first] ? now - due[k - first] : 0;
		p->recs[k].late_ns = late > UINT32_MAX ? UINT32_MAX : (uint32_t)late;
		__atomic_store_n(&p->recs[k].send_ns, now, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&p->sent, i, __ATOMIC_RELEASE);
	if (send_all(fd, q->buf.data, q->buf.len) < 0) {
		if (cl->to.proto == WL_PROTO_UDP && errno == ECONNREFUSED) /* an earlier datagram's ICMP: */
			__atomic_store_n(&p->udp_refused, 1, __ATOMIC_RELEASE); /* nobody listens, the receiver says ERR */
		else
			*broken = true; /* the receiver sees the broken connection and marks ERR */
	}
	return i;
}

static void receive_session(struct pair *p)
{
	struct wl_rx rx;
	wl_rx_init(&rx, p->fd, p->lo, p->cl->to.proto == WL_PROTO_UDP);
	rx.shared = true;
	for (;;) {
		uint64_t now = wl_now_ns();
		wl_rx_expire(p, &rx, now);
		int64_t end = __atomic_load_n(&p->sess_end, __ATOMIC_ACQUIRE);
		if (end >= 0 && rx.cursor >= (uint64_t)end)
			break;
		wl_rx_read(p, &rx, wl_rx_wait_ms(p, &rx, now));
	}
	wl_rx_free(&rx);
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

/* The sending half of one session; the receiver runs it alongside. */
static void send_session(struct pair *p, struct wl_sendq *q, int fd, uint64_t lo, uint64_t hi, uint32_t session)
{
	struct client *cl = p->cl;
	p->fd = fd;
	__atomic_store_n(&p->sess_end, -1, __ATOMIC_RELEASE);
	sem_post(&p->ready);
	uint64_t i = lo;
	bool broken = false;
	while (i < hi && !broken && !__atomic_load_n(&cl->stop, __ATOMIC_RELAXED)) {
		if (!q->have_due) {
			q->due = wl_pace_next(&q->pace, cl->start_ns, &p->rng);
			q->have_due = true;
		}
		wl_sleep_until(q->due, cl->spin);
		i = wl_pair_send(p, q, fd, i, hi, session, &broken);
	}
	__atomic_store_n(&p->sess_end, (int64_t)i, __ATOMIC_RELEASE);
	while (sem_wait(&p->done) < 0 && errno == EINTR)
		;
}

/* A pair's sessions, one connection each, run by session() on the calling thread. */
void wl_pair_run(struct pair *p, wl_session_fn session)
{
	struct client *cl = p->cl;
	struct wl_sendq q = {0};
	if (cl->ncpus) {
		char who[32];
		snprintf(who, sizeof(who), "pair %d", p->index);
		wl_pin_thread(cl->cpus[p->index % cl->ncpus], who);
	}
	wl_pace_init(&q.pace, cl->pace_mode, &cl->pace_value, cl->rss_ns, cl->spin);
	if (cl->stag_send && cl->pace_mode != WL_PACE_CLOSED) /* pair i starts i/nt of a mean period late */
		q.pace.offset_ns = wl_pace_mean_period_ns(&q.pace) * (uint64_t)p->index / (uint64_t)cl->npairs;
	for (uint64_t s = 0; s < cl->nsessions && !cl->stop; s++) {
		uint64_t lo = cl->nreq * s / cl->nsessions, hi = cl->nreq * (s + 1) / cl->nsessions;
		if (lo == hi)
			continue;
		int fd = pair_connect(p, lo, hi, (uint32_t)s);
		if (fd < 0)
			continue;
		p->lo = lo;
		p->hi = hi;
		session(p, &q, fd, lo, hi, (uint32_t)s);
		if (close(fd) < 0)
			wl_err("pair %d: close: %s", p->index, strerror(errno));
	}
	wl_buf_free(&q.buf);
	p->finished = true;
}

void *wl_sender_main(void *arg)
{
	struct pair *p = arg;
	wl_pair_run(p, send_session);
	sem_post(&p->ready); /* p->finished: the receiver ends */
	return NULL;
}
