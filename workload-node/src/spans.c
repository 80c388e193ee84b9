/* spans: what a node says about a request in its trace (trace.h). A
 * "serve" span per request received, whose parent is the span that sent
 * it (the client's "request" or another node's "forward.send", carried in
 * the request's header); under it a "compute", "load", "store" or
 * "forward" span per op; under a "forward" a "forward.send" per target and
 * attempt, which the target's own "serve" names as its parent. Each span
 * gives its op's parameters as the request asked them. Called only when
 * the worker traces. */
#include "spans.h"
#include "trace.h"
#include "worker.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#define ADDR_TEXT 64

/* Whole microseconds from one CLOCK_REALTIME time to a later one; 0 if it is not later. */
static int64_t us_between(uint64_t from_ns, uint64_t to_ns)
{
	return to_ns > from_ns ? (int64_t)((to_ns - from_ns) / 1000) : 0;
}

/* "host:port" or "[v6]:port", "udp://" first for UDP: the client's syntax. */
static void addr_text(char out[ADDR_TEXT], char host[INET6_ADDRSTRLEN], int proto, int af, const void *raw,
		      unsigned port)
{
	if (!inet_ntop(af, raw, host, INET6_ADDRSTRLEN))
		snprintf(host, INET6_ADDRSTRLEN, "?");
	snprintf(out, ADDR_TEXT, "%s%s%s%s:%u", proto == WL_PROTO_UDP ? "udp://" : "", af == AF_INET6 ? "[" : "", host,
		 af == AF_INET6 ? "]" : "", port);
}

/* A forward target as text; its port. */
static unsigned target_text(const struct wl_job *j, unsigned index, char out[ADDR_TEXT],
			    char host[INET6_ADDRSTRLEN])
{
	struct wl_target t;
	const char *why;
	if (wl_fwd_target(&j->op, index, &t, &why) < 0) { /* validated on receipt */
		snprintf(out, ADDR_TEXT, "?");
		snprintf(host, INET6_ADDRSTRLEN, "?");
		return 0;
	}
	addr_text(out, host, t.proto, t.family == 6 ? AF_INET6 : AF_INET, t.addr, t.port);
	return t.port;
}

/* The sender of the request, as "host:port"; false when it is not known. */
static bool peer_text(const struct wl_job *j, char out[ADDR_TEXT])
{
	char host[INET6_ADDRSTRLEN];
	if (j->peerlen >= sizeof(struct sockaddr_in6) && j->peer.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&j->peer;
		addr_text(out, host, WL_PROTO_TCP, AF_INET6, &s->sin6_addr, ntohs(s->sin6_port));
		return true;
	}
	if (j->peerlen >= sizeof(struct sockaddr_in) && j->peer.ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)&j->peer;
		addr_text(out, host, WL_PROTO_TCP, AF_INET, &s->sin_addr, ntohs(s->sin_port));
		return true;
	}
	return false;
}

void wl_spans_job_init(struct wl_job *j, const struct wl_hdr *hdr, const struct wl_rx_stamp *rx_at)
{
	/* A request without trace context (a client that does not trace)
	 * starts a trace here; its reply carries the new trace id. */
	if (wl_trace_id_is_zero(j->trace_id, 16)) {
		wl_trace_new_id(j->trace_id, 16);
		memset(j->parent_span, 0, 8);
	}
	wl_trace_new_id(j->span_id, 8);
	/* From the kernel's receive: a late read (the worker's wake-up, or a
	 * worker busy elsewhere) is this node's queueing, not the network's. */
	j->read_rt_ns = rx_at && rx_at->read_rt_ns ? rx_at->read_rt_ns : wl_realtime_ns();
	j->start_rt_ns = rx_at && rx_at->kernel_rt_ns ? rx_at->kernel_rt_ns : j->read_rt_ns;
	j->req_bytes = hdr->len;
}

void wl_spans_serve(const struct wl_job *j, int status, uint32_t reply_bytes, uint64_t end_rt_ns)
{
	struct wl_span s;
	char peer[ADDR_TEXT];
	uint64_t first = j->first_op_rt_ns ? j->first_op_rt_ns : end_rt_ns;
	wl_span_begin(&s, j->trace_id, j->span_id, j->parent_span, "serve", WL_SPAN_SERVER, j->start_rt_ns, end_rt_ns);
	wl_span_int(&s, "wl.request.bytes", j->req_bytes);
	wl_span_int(&s, "wl.reply.bytes", reply_bytes);
	wl_span_int(&s, "wl.queue_us", us_between(j->start_rt_ns, first));
	wl_span_int(&s, "wl.socket_us", us_between(j->start_rt_ns, j->read_rt_ns));
	if (peer_text(j, peer))
		wl_span_str(&s, "wl.peer", peer);
	wl_span_str(&s, "wl.proto", j->udp_fd >= 0 ? "udp" : "tcp");
	if (j->skipped)
		wl_span_int(&s, "wl.skipped", j->skipped);
	wl_trace_emit(j->w->trace, &s, status);
}

void wl_spans_refused(struct wl_conn *c, const struct wl_hdr *hdr)
{
	struct wl_job j = {.w = c->w, .udp_fd = -1, .peer = c->peer.sa, .peerlen = c->peer.salen};
	memcpy(j.trace_id, hdr->trace_id, 16);
	memcpy(j.parent_span, hdr->parent_span, 8);
	wl_spans_job_init(&j, hdr, &c->rx_at);
	wl_spans_serve(&j, WL_ST_ERR, WL_REPLY_MIN, wl_realtime_ns());
}

void wl_spans_op(const struct wl_job *j, int status, uint64_t end_rt_ns)
{
	static const char *const sync[] = {"nosync", "sync", "psync"};
	const struct wl_op *op = &j->op;
	const char *name = op->kind == WL_OP_COMPUTE ? "compute" : op->kind == WL_OP_LOAD ? "load" : "store";
	struct wl_span s;
	uint8_t sid[8];
	wl_trace_new_id(sid, 8);
	wl_span_begin(&s, j->trace_id, sid, j->span_id, name, WL_SPAN_INTERNAL, j->op_start_rt_ns, end_rt_ns);
	if (op->kind == WL_OP_COMPUTE) {
		wl_span_int(&s, "wl.compute.us", (int64_t)(op->compute.ns / 1000));
		wl_span_int(&s, "wl.compute.ns", (int64_t)op->compute.ns);
		wl_span_str(&s, "wl.compute.mode", op->flags & WL_COMPUTE_WALL   ? "wall"
						    : op->flags & WL_COMPUTE_LOOP ? "loop"
										  : "cpu");
	} else {
		wl_span_int(&s, "wl.bytes", op->io.bytes);
		wl_span_int(&s, "wl.offset", (int64_t)op->io.offset);
		if (op->kind == WL_OP_STORE)
			wl_span_str(&s, "wl.sync", sync[op->flags <= WL_SYNC_PERIODIC ? op->flags : 0]);
	}
	wl_trace_emit(j->w->trace, &s, status);
}

void wl_spans_forward(const struct wl_job *j, int status, uint64_t end_rt_ns)
{
	char text[WL_MAX_TARGETS][ADDR_TEXT], host[INET6_ADDRSTRLEN];
	const char *targets[WL_MAX_TARGETS];
	unsigned n = j->op.fwd.ntargets;
	for (unsigned i = 0; i < n; i++) {
		target_text(j, i, text[i], host);
		targets[i] = text[i];
	}
	struct wl_span s;
	wl_span_begin(&s, j->trace_id, j->fwd_span, j->span_id, "forward", WL_SPAN_INTERNAL, j->op_start_rt_ns,
		      end_rt_ns);
	wl_span_strs(&s, "wl.forward.targets", targets, n);
	wl_span_int(&s, "wl.forward.nack", j->op.fwd.nack);
	wl_span_int(&s, "wl.forward.timeout_us", j->op.fwd.timeout_us);
	wl_span_int(&s, "wl.forward.retries", j->op.fwd.retries);
	wl_span_int(&s, "wl.forward.ok", j->ok);
	wl_span_int(&s, "wl.forward.failed", j->failed);
	wl_trace_emit(j->w->trace, &s, status);
}

void wl_spans_forward_send(const struct wl_pending *p, int status, uint64_t end_rt_ns, uint64_t reply_rt_ns)
{
	const struct wl_job *j = p->job;
	char text[ADDR_TEXT], host[INET6_ADDRSTRLEN];
	unsigned port = target_text(j, p->target, text, host);
	struct wl_span s;
	wl_span_begin(&s, j->trace_id, p->span_id, j->fwd_span, "forward.send", WL_SPAN_CLIENT, p->start_rt_ns,
		      end_rt_ns);
	wl_span_str(&s, "wl.target", text);
	wl_span_int(&s, "wl.attempt", p->attempt);
	wl_span_str(&s, "net.peer.name", host);
	wl_span_int(&s, "net.peer.port", port);
	if (reply_rt_ns) /* this node's wake-up to read the reply: a wait here, not the network's */
		wl_span_int(&s, "wl.reply.wait_us", us_between(reply_rt_ns, end_rt_ns));
	wl_trace_emit(j->w->trace, &s, status);
}
