/* replies: the receiving half of a pair, shared by the two-thread loop
 * (pair.c) and the one-thread loop (solo.c): match replies to requests by
 * id, drop the bytes of large replies as they arrive, resolve timeouts, and
 * wait for the socket with as few system calls as possible. */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define WAIT_CAP_MS 20 /* a blocked receiver still notices the sender finishing or Ctrl-C */

void wl_rx_init(struct wl_rx *rx, int fd, uint64_t lo, bool udp)
{
	*rx = (struct wl_rx){.fd = fd, .cursor = lo, .udp = udp, .timeo_ms = -1};
}

void wl_rx_free(struct wl_rx *rx) { wl_buf_free(&rx->in); }

/* A reply as it was read: its length, and how long it waited for the read
 * after the kernel received its last byte (tracing). */
struct reply_in {
	uint32_t bytes;
	uint64_t wait_ns;
};

/* Request i's root span (trace.h): from its send to its reply, or to when the client gave up (reply NULL). */
static void request_span(struct pair *p, uint64_t i, uint8_t status, uint64_t send_ns, uint64_t now,
			 const struct reply_in *reply)
{
	struct client *cl = p->cl;
	const struct wl_req_trace *t = &p->ids[i];
	struct wl_span s;
	wl_span_begin(&s, t->trace_id, t->span_id, NULL, "request", WL_SPAN_CLIENT, send_ns + cl->rt_offset_ns,
		      now + cl->rt_offset_ns);
	wl_span_str(&s, "wl.target", cl->to.text);
	wl_span_int(&s, "wl.request_id", (int64_t)((uint64_t)p->index << 40 | i)); /* the id on the wire */
	wl_span_int(&s, "wl.attempt", 0);                                         /* the client never retries */
	wl_span_int(&s, "wl.request.bytes", t->req_bytes);
	wl_span_int(&s, "wl.reply.bytes", reply ? reply->bytes : 0);
	if (reply) /* the client's wake-up to read it: a wait here, not the network's */
		wl_span_int(&s, "wl.reply.wait_us", (int64_t)(reply->wait_ns / 1000));
	wl_span_str(&s, "wl.proto", cl->to.proto == WL_PROTO_UDP ? "udp" : "tcp");
	if (cl->pace_mode != WL_PACE_CLOSED)
		wl_span_int(&s, "wl.send_lateness_us", p->recs[i].late_ns / 1000);
	wl_span_int(&s, "wl.thread", p->index);
	wl_span_int(&s, "wl.session", p->recs[i].session);
	wl_trace_emit(cl->trace, &s, status);
}

void wl_rx_span_unsent(struct pair *p, uint64_t i)
{
	wl_trace_new_id(p->ids[i].trace_id, 16);
	wl_trace_new_id(p->ids[i].span_id, 8);
	p->ids[i].req_bytes = 0;
	request_span(p, i, WL_ST_ERR, p->recs[i].send_ns, p->recs[i].send_ns, NULL);
}

/* reply: the reply that came (its latency counts, whatever its status);
 * NULL: the client gave up. */
static void resolve(struct pair *p, uint64_t i, uint8_t status, uint64_t now, const struct reply_in *reply)
{
	struct wl_record *r = &p->recs[i];
	uint64_t send_ns = __atomic_load_n(&r->send_ns, __ATOMIC_ACQUIRE);
	r->latency_ns = now - send_ns;
	r->status = status;
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE); /* collect.c reads the record once done */
	if (reply)
		wl_hist_add(&p->sum.hist, r->latency_ns);
	p->sum.timeout += status == WL_ST_TIMEOUT;
	p->sum.ok += status == WL_ST_OK;
	p->sum.err += status == WL_ST_ERR;
	if (now > p->sum.last_done_ns)
		p->sum.last_done_ns = now;
	if (p->cl->trace)
		request_span(p, i, status, send_ns, now, reply);
}

static void finish(struct pair *p, const struct wl_rx *rx, uint64_t id, uint8_t status, uint64_t now,
		   uint32_t reply_bytes)
{
	uint64_t i = id & 0xffffffffffull, sent = __atomic_load_n(&p->sent, __ATOMIC_ACQUIRE);
	struct reply_in reply = {.bytes = reply_bytes, .wait_ns = rx->reply_wait_ns};
	if (i >= p->lo && i < sent && !p->recs[i].done)
		resolve(p, i, status, now, &reply);
}

/* Parse replies out of rx->in. A reply bigger than what has arrived is
 * dropped as it comes (rx->tail_left) and resolved when its last byte is
 * in, so that the latency of a large reply includes its transfer. */
static void take_replies(struct pair *p, struct wl_rx *rx, uint64_t now)
{
	struct wl_buf *in = &rx->in;
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
			rx->tail_left = hdr.len - have;
			rx->tail_id = hdr.id;
			rx->tail_status = status;
			rx->tail_len = hdr.len;
			break;
		}
		finish(p, rx, hdr.id, status, now, hdr.len);
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

void wl_rx_expire(struct pair *p, struct wl_rx *rx, uint64_t now)
{
	uint64_t sent = __atomic_load_n(&p->sent, __ATOMIC_ACQUIRE);
	/* UDP: an ICMP port unreachable said nobody listens; what is outstanding will get no reply */
	bool refused = rx->udp && __atomic_exchange_n(&p->udp_refused, 0, __ATOMIC_ACQ_REL);
	while (rx->cursor < sent) { /* oldest first: deadlines are in send order */
		struct wl_record *r = &p->recs[rx->cursor];
		if (!r->done && (rx->lost || refused))
			resolve(p, rx->cursor, WL_ST_ERR, now, NULL);
		else if (!r->done && now >= __atomic_load_n(&r->send_ns, __ATOMIC_ACQUIRE) + eff_timeout(p))
			resolve(p, rx->cursor, WL_ST_TIMEOUT, now, NULL);
		else if (!r->done)
			break;
		rx->cursor++;
	}
}

int wl_rx_wait_ms(struct pair *p, const struct wl_rx *rx, uint64_t now)
{
	uint64_t sent = __atomic_load_n(&p->sent, __ATOMIC_ACQUIRE);
	/* --busy-poll-for: traffic is likely to go on soon after a send or a
	 * reply; polling that long saves the wake-up of a blocked recv (the
	 * sender cannot wake this thread when it sends), and the bound stops
	 * the spinning once the traffic does. */
	if (p->cl->poll_window_ns) {
		uint64_t last = rx->last_rx_ns;
		if (sent > p->lo && __atomic_load_n(&p->recs[sent - 1].send_ns, __ATOMIC_ACQUIRE) > last)
			last = p->recs[sent - 1].send_ns;
		if (now < last + p->cl->poll_window_ns)
			return 0;
	}
	if (rx->cursor >= sent)
		return WAIT_CAP_MS;
	uint64_t due = __atomic_load_n(&p->recs[rx->cursor].send_ns, __ATOMIC_ACQUIRE) + eff_timeout(p);
	uint64_t ms = due > now ? (due - now) / 1000000 + 1 : 0;
	return ms > WAIT_CAP_MS ? WAIT_CAP_MS : (int)ms;
}

/* Block in recv itself, bounded by SO_RCVTIMEO, rather than in poll and
 * then recv: one system call per reply instead of two. The option is set
 * only when the wanted bound changes, which is rare: it is the cap unless
 * the oldest request nears its timeout. */
static int set_wait(struct wl_rx *rx, int wait_ms)
{
	if (wait_ms == rx->timeo_ms)
		return 0;
	struct timeval tv = {.tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000};
	if (setsockopt(rx->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return wl_err("setsockopt SO_RCVTIMEO %d ms: %s", wait_ms, strerror(errno));
	rx->timeo_ms = wait_ms;
	return 0;
}

int wl_rx_read(struct pair *p, struct wl_rx *rx, int wait_ms)
{
	if (rx->lost) {
		usleep(1000);
		return 0;
	}
	if (wl_buf_reserve(&rx->in, 65536) < 0 || (wait_ms > 0 && set_wait(rx, wait_ms) < 0)) {
		rx->lost = true;
		return 0;
	}
	struct wl_buf *in = &rx->in;
	/* Polling while a sender thread shares the socket: recv takes the socket
	 * lock, so a receiver spinning on it makes the sender's send sleep on
	 * that lock (and itself sleep on the sender's); poll reads the state
	 * without the lock, and recv runs only when there is something to take. */
	if (wait_ms == 0 && rx->shared) {
		struct pollfd pf = {.fd = rx->fd, .events = POLLIN};
		if (poll(&pf, 1, 0) <= 0)
			return 0;
	}
	/* wait_ms 0 (busy polling, or a deadline already passed) never blocks;
	 * SO_RCVTIMEO of 0 would mean "forever". */
	int flags = wait_ms > 0 ? 0 : MSG_DONTWAIT;
	uint8_t *to = in->data + in->len;
	size_t room = in->cap - in->len;
	struct wl_rx_stamp at;
	ssize_t n = p->cl->trace ? wl_recv_stamped(rx->fd, to, room, flags, NULL, NULL, &at)
				 : recv(rx->fd, to, room, flags);
	if (n < 0 && rx->udp && errno == ECONNREFUSED)
		__atomic_store_n(&p->udp_refused, 1, __ATOMIC_RELEASE); /* settled by the next wl_rx_expire */
	if (n < 0 && (errno == EAGAIN || errno == EINTR || (rx->udp && errno == ECONNREFUSED)))
		return 0;
	if (n <= 0) {
		rx->lost = true; /* the node closed or reset: what is outstanding is ERR */
		return 0;
	}
	uint64_t now = wl_now_ns();
	rx->last_rx_ns = now;
	/* Tracing: the replies this read completes waited this long for it.
	 * The latency (the application's view) still runs to the read. */
	if (p->cl->trace)
		rx->reply_wait_ns = at.read_rt_ns - at.kernel_rt_ns;
	if (rx->tail_left) {
		uint64_t drop = (uint64_t)n < rx->tail_left ? (uint64_t)n : rx->tail_left;
		rx->tail_left -= drop;
		memmove(in->data + in->len, in->data + in->len + drop, (size_t)n - drop);
		n -= (ssize_t)drop;
		if (rx->tail_left == 0)
			finish(p, rx, rx->tail_id, rx->tail_status, now, rx->tail_len);
	}
	in->len += (size_t)n;
	take_replies(p, rx, now);
	if (rx->udp) { /* one datagram, one reply */
		in->off = in->len = 0;
		rx->tail_left = 0;
	}
	return 1;
}
