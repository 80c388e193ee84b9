/* forward: the FORWARD op. A job sends its sub-chain to each target over a
 * per-worker cached outbound connection, then waits for nack replies. Each
 * send is a pending slot with a deadline; a reply, a timeout or a broken
 * connection settles it, with retries before a target counts as failed.
 * A settled FORWARD is handed back to the loop (from a reply or a sweep),
 * which continues the job; never from inside wl_fwd_start, so a job is
 * never freed under its own feet.
 * Sends go over the worker's outbound connections (outbound.h); a target
 * that does not read gets no more than --max-backlog bytes queued before
 * forwards to it fail. */
#include "forward.h"
#include "flow.h"
#include "outbound.h"
#include "spans.h"
#include "trace.h"
#include "worker.h"

#include <errno.h>
#include <string.h>

#define NO_PENDING UINT32_MAX

void wl_fwd_forget_closed(struct wl_worker *w)
{
	if (!w->conns.dead)
		return; /* nothing was closed during this loop pass */
	for (uint32_t s = 0; w->fwd.inuse && s < w->fwd.cap; s++) {
		struct wl_pending *p = &w->fwd.pend[s];
		if (p->in_use && p->conn && p->conn->dead) { /* settled as ERR by the next sweep */
			p->failed = true;
			p->deadline_ns = 0;
			p->conn = NULL;
		}
	}
	wl_out_forget_closed(w);
}

static uint32_t pend_alloc(struct wl_worker *w)
{
	for (uint32_t i = 0; i < w->fwd.cap; i++)
		if (!w->fwd.pend[i].in_use)
			return i;
	uint32_t slot = w->fwd.cap; /* every slot is in use: the first new one */
	size_t cap = w->fwd.cap;
	if (cap >= UINT32_MAX / 2 || wl_grow(&w->fwd.pend, &cap, slot, sizeof(*w->fwd.pend), 64) < 0) {
		wl_err("worker %d: out of memory for %u pending forwards", w->index, slot + 1);
		return NO_PENDING;
	}
	memset(w->fwd.pend + slot, 0, (cap - slot) * sizeof(*w->fwd.pend));
	w->fwd.cap = (uint32_t)cap;
	return slot;
}

/* UDP: one datagram per request, padding included, sent now; loss shows up as a timeout. */
static int send_datagram(struct wl_worker *w, struct wl_conn *c, const struct wl_target *t, uint64_t id,
			 const uint8_t *trace_id, const uint8_t *span)
{
	if ((uint64_t)WL_HDR_LEN + 4 + t->chain_len + t->pad_len > 65507)
		return -1; /* cannot be one datagram */
	struct wl_buf b = {0};
	size_t at = wl_put_hdr(&b, WL_MSG_REQUEST, id, trace_id, span);
	wl_put_u32(&b, t->reply_len);
	wl_put_bytes(&b, t->chain, t->chain_len);
	wl_put_zeros(&b, t->pad_len);
	wl_finish_msg(&b, at);
	int rc = 0;
	if (wl_enc_ok(&b) < 0)
		rc = wl_err("worker %d: out of memory forwarding to %s", w->index, c->peer.text);
	else if (send(c->fd, b.data, b.len, 0) < 0 && errno != ECONNREFUSED)
		wl_err("worker %d: udp forward to %s: %s", w->index, c->peer.text, strerror(errno));
	wl_buf_free(&b);
	return rc;
}

/* TCP: the request goes into the connection's queue; its padding is not stored. */
static int queue_request(struct wl_worker *w, struct wl_conn *c, const struct wl_target *t, uint64_t id,
			 const uint8_t *trace_id, const uint8_t *span)
{
	struct wl_buf *b = &c->out.data;
	size_t at = wl_put_hdr(b, WL_MSG_REQUEST, id, trace_id, span);
	wl_put_u32(b, t->reply_len);
	wl_put_bytes(b, t->chain, t->chain_len);
	wl_patch_u32(b, at + 8, (uint32_t)(WL_HDR_LEN + 4 + t->chain_len + t->pad_len)); /* within --max-request */
	wl_outq_zeros(&c->out, t->pad_len);
	if (wl_enc_ok(b) < 0) { /* out of memory: fail this connection's forwards */
		wl_err("worker %d: out of memory forwarding to %s", w->index, c->peer.text);
		wl_conn_kill(c);
		return -1;
	}
	wl_flow_send(c);
	return 0;
}

/* A pending forward that failed before it was sent: settled as ERR in the sweep. */
static void fail_now(struct wl_pending *p)
{
	p->failed = true;
	p->deadline_ns = 0;
}

/* A pending slot for this attempt, its deadline running; NO_PENDING when out of memory. */
static uint32_t new_pending(struct wl_job *j, unsigned target, unsigned attempt)
{
	struct wl_worker *w = j->w;
	uint32_t slot = pend_alloc(w);
	if (slot == NO_PENDING)
		return NO_PENDING;
	struct wl_pending *p = &w->fwd.pend[slot];
	*p = (struct wl_pending){.job = j, .gen = ++w->gen, .target = (uint8_t)target,
				 .attempt = (uint8_t)attempt, .in_use = true};
	p->deadline_ns = wl_now_ns() + (uint64_t)j->op.fwd.timeout_us * 1000;
	if (w->trace) {
		wl_trace_new_id(p->span_id, 8);
		p->start_rt_ns = wl_realtime_ns();
	}
	w->fwd.inuse++;
	j->pending[target] = slot;
	j->npending++;
	WL_COUNT(w, forwards, 1);
	return slot;
}

/* The request of pending slot to target t on c: sent (UDP) or queued (TCP). */
static void send_request(struct wl_job *j, uint32_t slot, struct wl_conn *c, const struct wl_target *t)
{
	struct wl_worker *w = j->w;
	struct wl_pending *p = &w->fwd.pend[slot];
	p->conn = c;
	c->npend++;
	c->last_used_ns = wl_now_ns();
	/* id = generation (high 32 bits) | slot: a late reply to a reused slot is ignored. */
	uint64_t id = (uint64_t)p->gen << 32 | slot;
	/* The target's serve span hangs under this send; a node that does not
	 * trace passes its own parent on, so a traced target still links up. */
	const uint8_t *span = w->trace ? p->span_id : j->parent_span;
	if (c->peer.proto == WL_PROTO_UDP) {
		if (send_datagram(w, c, t, id, j->trace_id, span) < 0)
			fail_now(p);
		return;
	}
	queue_request(w, c, t, id, j->trace_id, span);
}

static void send_attempt(struct wl_job *j, unsigned target, unsigned attempt)
{
	struct wl_worker *w = j->w;
	struct wl_target t;
	const char *why;
	wl_fwd_target(&j->op, target, &t, &why); /* validated on receipt */
	uint32_t slot = new_pending(j, target, attempt);
	if (slot == NO_PENDING) {
		j->pending[target] = NO_PENDING;
		j->failed++; /* out of memory: the target counts as failed */
		return;
	}
	struct wl_conn *c = wl_out_get(w, &t);
	if (!c) {
		fail_now(&w->fwd.pend[slot]); /* e.g. connection refused at once */
		return;
	}
	if (wl_outq_mem(&c->out) >= w->node->cfg.max_backlog_bytes) {
		WL_COUNT(w, over_backlog, 1); /* the target does not read what it was sent */
		fail_now(&w->fwd.pend[slot]);
		return;
	}
	send_request(j, slot, c, &t);
}

void wl_fwd_start(struct wl_job *j)
{
	j->ok = j->failed = j->timeouts = j->npending = 0;
	for (unsigned i = 0; i < WL_MAX_TARGETS; i++)
		j->pending[i] = NO_PENDING;
	if (j->w->trace)
		wl_trace_new_id(j->fwd_span, 8);
	for (unsigned i = 0; i < j->op.fwd.ntargets; i++)
		send_attempt(j, i, 0);
}

static void release(struct wl_worker *w, uint32_t slot)
{
	struct wl_pending *p = &w->fwd.pend[slot];
	if (p->conn) {
		p->conn->last_used_ns = wl_now_ns();
		if (--p->conn->npend == 0)
			wl_out_note_idle(w, p->conn);
		p->conn = NULL;
	}
	p->job->pending[p->target] = NO_PENDING;
	p->job->npending--;
	p->in_use = false;
	w->fwd.inuse--;
}

/* Decide the job once a target settles: quorum reached, quorum impossible
 * (true, the outcome in j->op_status), or wait (false). */
static bool settle(struct wl_job *j)
{
	struct wl_worker *w = j->w;
	int n = j->op.fwd.ntargets, need = j->op.fwd.nack;
	bool done = j->ok >= need, lost = j->failed > n - need;
	if (!done && !lost)
		return false;
	uint64_t now_rt = w->trace ? wl_realtime_ns() : 0;
	for (int i = 0; i < n; i++) { /* late replies to these are dropped */
		if (j->pending[i] == NO_PENDING)
			continue;
		if (w->trace)
			wl_spans_forward_send(&w->fwd.pend[j->pending[i]], WL_SPAN_ABANDONED, now_rt, 0);
		release(w, j->pending[i]);
	}
	j->op_status = done ? WL_ST_OK : j->timeouts ? WL_ST_TIMEOUT : WL_ST_ERR;
	if (w->trace)
		wl_spans_forward(j, j->op_status, now_rt);
	return true;
}

/* One target's send ended: the job if that settled its FORWARD, else NULL.
 * reply_rt_ns: when the reply that settles it arrived (tracing), 0 for a timeout or error. */
static struct wl_job *target_result(struct wl_worker *w, uint32_t slot, uint8_t status, uint64_t reply_rt_ns)
{
	struct wl_pending *p = &w->fwd.pend[slot];
	struct wl_job *j = p->job;
	unsigned target = p->target, attempt = p->attempt;
	if (w->trace)
		wl_spans_forward_send(p, status, wl_realtime_ns(), reply_rt_ns);
	release(w, slot);
	if (status != WL_ST_OK && attempt < j->op.fwd.retries) {
		WL_COUNT(w, fwd_retries, 1);
		send_attempt(j, target, attempt + 1);
		return NULL;
	}
	if (status == WL_ST_OK) {
		j->ok++;
	} else {
		j->failed++;
		if (status == WL_ST_TIMEOUT)
			j->timeouts++;
		WL_COUNT(w, fwd_errors, status == WL_ST_TIMEOUT ? 0 : 1);
	}
	return settle(j) ? j : NULL;
}

struct wl_job *wl_fwd_on_reply(struct wl_worker *w, const uint8_t *msg, size_t len, uint64_t rx_rt_ns)
{
	struct wl_hdr hdr;
	const char *why;
	if (wl_decode_hdr(msg, len, &hdr, &why) < 0)
		return NULL;
	uint32_t slot = (uint32_t)hdr.id, gen = (uint32_t)(hdr.id >> 32);
	if (slot >= w->fwd.cap || !w->fwd.pend[slot].in_use || w->fwd.pend[slot].gen != gen)
		return NULL; /* late: the quorum was settled without it */
	return target_result(w, slot, wl_reply_status(msg), rx_rt_ns);
}

struct wl_job *wl_fwd_sweep(struct wl_worker *w, uint64_t now_ns)
{
	struct wl_job *settled = NULL, **tail = &settled;
	wl_fwd_forget_closed(w); /* their forwards fail in this sweep */
	for (uint32_t s = 0; s < w->fwd.cap; s++) {
		struct wl_pending *p = &w->fwd.pend[s];
		if (!p->in_use || p->deadline_ns > now_ns)
			continue;
		if (!p->failed)
			WL_COUNT(w, fwd_timeouts, 1);
		struct wl_job *j = target_result(w, s, p->failed ? WL_ST_ERR : WL_ST_TIMEOUT, 0);
		if (j) { /* in settling order */
			j->next = NULL;
			*tail = j;
			tail = &j->next;
		}
	}
	return settled;
}

int wl_fwd_timeout_ms(struct wl_worker *w, uint64_t now_ns)
{
	uint64_t first = w->outs.n ? wl_out_next_idle(w) : UINT64_MAX;
	for (uint32_t s = 0; w->fwd.inuse && s < w->fwd.cap; s++)
		if (w->fwd.pend[s].in_use && w->fwd.pend[s].deadline_ns < first)
			first = w->fwd.pend[s].deadline_ns;
	if (first == UINT64_MAX)
		return -1;
	if (first <= now_ns)
		return 0;
	uint64_t ms = (first - now_ns + 999999) / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}
