/* job: one request's life on a node. A complete message is validated and
 * checked against the caps, copied (its padding left behind) into a job,
 * charged to its connection's backlog, run op by op (COMPUTE here, LOAD and
 * STORE on the storage thread, FORWARD parked until its quorum), and ends in
 * a reply. */
#include "job.h"
#include "compute.h"
#include "flow.h"
#include "forward.h"
#include "spans.h"
#include "storage.h"
#include "trace.h"
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The memory a job holds for its connection until its reply is queued:
 * the job, its copy of the chain and the stored part of its reply. */
static size_t job_charge(const struct wl_job *j, size_t used)
{
	return sizeof(*j) + used + WL_REPLY_MIN + (j->reply_len < WL_INLINE_PAD ? j->reply_len : WL_INLINE_PAD);
}

/* A datagram carries at most 64 KiB: a larger reply size is an error reply. */
#define UDP_REPLY_MAX 65000

static void udp_reply(struct wl_job *j, uint8_t status)
{
	struct wl_worker *w = j->w;
	struct wl_buf b = {0};
	uint32_t len = j->reply_len > UDP_REPLY_MAX ? WL_REPLY_MIN : j->reply_len;
	wl_put_reply(&b, j->id, j->trace_id, j->reply_len > UDP_REPLY_MAX ? WL_ST_ERR : status, len);
	if (wl_enc_ok(&b) == 0 &&
	    sendto(j->udp_fd, b.data, b.len, 0, (struct sockaddr *)&j->peer, j->peerlen) < 0)
		wl_err("worker %d: udp reply: %s", w->index, strerror(errno));
	else
		WL_COUNT(w, bytes_out, b.len);
	wl_buf_free(&b);
	WL_COUNT(w, replies, 1);
}

void wl_job_finish(struct wl_job *j, uint8_t status)
{
	struct wl_worker *w = j->w;
	struct wl_conn *c = wl_conn_at(w, j->conn_slot, j->conn_gen);
	if (w->trace) {
		bool udp_err = j->udp_fd >= 0 && j->reply_len > UDP_REPLY_MAX;
		uint32_t sent = udp_err ? WL_REPLY_MIN : j->udp_fd >= 0 || c ? j->reply_len : 0;
		wl_spans_serve(j, udp_err ? WL_ST_ERR : status, sent, wl_realtime_ns());
	}
	if (c)
		c->held -= j->held;
	if (j->udp_fd >= 0) {
		udp_reply(j, status);
	} else if (c) {
		wl_flow_put_reply(c, j->id, j->trace_id, status, j->reply_len);
		if (wl_enc_ok(&c->out.data) < 0) { /* a half-written reply would corrupt the stream */
			wl_err("worker %d: out of memory for a %u-byte reply", w->index, j->reply_len);
			wl_conn_kill(c);
		} else {
			WL_COUNT(w, replies, 1);
			wl_flow_queue(c);
		}
	}
	free(j->msg);
	free(j);
	if (c)
		wl_flow_progress(c);
}

/* Run the chain from where it stands until it ends or waits for an op that runs elsewhere. */
static void resume(struct wl_job *j)
{
	const char *why;
	for (;;) {
		int rc = wl_chain_next(&j->cur, &j->op, &why);
		if (rc <= 0) { /* validated on receipt, so rc < 0 means a bug: say ERR */
			wl_job_finish(j, rc == 0 ? WL_ST_OK : WL_ST_ERR);
			return;
		}
		if (j->w->trace && j->op.kind != WL_OP_SKIP) {
			j->op_start_rt_ns = wl_realtime_ns();
			if (!j->first_op_rt_ns)
				j->first_op_rt_ns = j->op_start_rt_ns;
		}
		switch (j->op.kind) {
		case WL_OP_COMPUTE:
			if (j->op.compute.ns) /* replies already made must not wait for this work */
				wl_flow_send_queued(j->w);
			wl_compute(&j->op, &j->w->node->stop);
			if (j->w->trace)
				wl_spans_op(j, WL_ST_OK, wl_realtime_ns());
			break;
		case WL_OP_SKIP: {
			unsigned count = j->op.skip.draw < j->op.skip.threshold ? j->op.skip.count : 0;
			for (unsigned i = 0; i < count; i++) { /* j->op is overwritten: count was copied */
				if (wl_chain_next(&j->cur, &j->op, &why) <= 0)
					break;
				j->skipped++; /* the serve span's wl.skipped */
			}
			break;
		}
		case WL_OP_LOAD:
		case WL_OP_STORE:
			wl_storage_submit(j->w->node->storage, j);
			return;
		case WL_OP_FORWARD:
			wl_fwd_start(j);
			return;
		}
	}
}

static struct wl_job *job_new(struct wl_worker *w, const uint8_t *msg, size_t used, const struct wl_hdr *hdr,
			      const struct wl_rx_stamp *rx_at)
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
	if (w->trace)
		wl_spans_job_init(j, hdr, rx_at);
	wl_request_chain(copy, used, &j->reply_len, &j->cur);
	j->held = job_charge(j, used);
	return j;
}

struct wl_job *wl_job_accept(struct wl_worker *w, const uint8_t *msg, size_t len, const struct wl_rx_stamp *rx_at,
			     enum wl_cap *cap)
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
	*cap = wl_caps_check(&w->node->cfg, msg, used);
	return job_new(w, msg, used, &hdr, rx_at);
}

void wl_job_start(struct wl_job *j, struct wl_conn *origin, enum wl_cap cap)
{
	j->conn_slot = origin->slot;
	j->conn_gen = origin->gen;
	origin->held += j->held;
	if (j->w->trace && j->udp_fd < 0) { /* wl.peer; a UDP job has its sender already */
		j->peer = origin->peer.sa;
		j->peerlen = origin->peer.salen;
	}
	if (cap == WL_CAP_NONE) {
		resume(j);
		return;
	}
	if (cap == WL_CAP_REPLY)
		WL_COUNT(j->w, over_reply, 1);
	else if (cap == WL_CAP_REQUEST)
		WL_COUNT(j->w, over_request, 1);
	else
		WL_COUNT(j->w, over_compute, 1);
	j->reply_len = WL_REPLY_MIN;
	wl_job_finish(j, WL_ST_ERR);
}

void wl_job_op_done(struct wl_job *j)
{
	if (j->op_status == WL_ST_OK)
		resume(j);
	else
		wl_job_finish(j, (uint8_t)j->op_status);
}
