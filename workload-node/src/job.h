/* job: one request's life on a node, from its complete message to its
 * reply: validation and the caps, its chain run op by op (COMPUTE here,
 * LOAD and STORE on the storage thread, FORWARD parked until its quorum),
 * the reply queued on its origin. Called by the loop: drain.c and reader.c
 * with a request, worker.c and drain.c again when an op that ran elsewhere
 * ends. It calls caps.c, compute.c, storage.c, forward.c (to start a
 * FORWARD), conn.c and flow.c (the reply to its origin) and spans.c. */
#pragma once
#include "caps.h"
#include "rxstamp.h"
#include "wire.h"

#include <sys/socket.h>

struct wl_worker;
struct wl_conn;

struct wl_job {
	struct wl_worker *w;
	uint32_t conn_slot, conn_gen; /* TCP origin; stale once the client is gone */
	int udp_fd;                   /* UDP origin, or -1 */
	struct sockaddr_storage peer; /* the sender: where a UDP reply goes; for TCP only when tracing */
	socklen_t peerlen;
	uint64_t id;
	/* tracing (spans.c): the serve span, its start (the kernel's receive of
	 * the request's last byte), when the node read that byte, when its first
	 * op started, the forward span of the FORWARD in progress */
	uint8_t trace_id[16], span_id[8], parent_span[8], fwd_span[8];
	uint64_t start_rt_ns, read_rt_ns, first_op_rt_ns;
	uint32_t req_bytes;
	uint16_t skipped;
	uint8_t *msg;
	struct wl_cursor cur;
	uint32_t reply_len;
	size_t held; /* charged to the origin connection until the reply is queued */
	/* the op in progress (storage or forward) */
	struct wl_op op;
	uint64_t op_start_rt_ns;
	int ok, failed, timeouts, npending;
	uint32_t pending[WL_MAX_TARGETS]; /* pend slots, UINT32_MAX when settled */
	int op_status; /* how a LOAD, STORE or FORWARD ended (enum wl_status) */
	struct wl_job *next; /* the storage queue, the inbox, a sweep's settled jobs */
};

/* A complete message: validated (NULL, counted, if it breaks a rule), copied
 * without its padding; *cap says which cap it exceeds, if any. rx_at: when
 * tracing, when the message arrived. */
struct wl_job *wl_job_accept(struct wl_worker *w, const uint8_t *msg, size_t len, const struct wl_rx_stamp *rx_at,
			     enum wl_cap *cap);
/* Charge the job to its origin and run it, or answer ERR at once for a cap. */
void wl_job_start(struct wl_job *job, struct wl_conn *origin, enum wl_cap cap);
/* A LOAD, STORE or FORWARD that ran elsewhere ended with job->op_status:
 * continue the chain, or answer with that status. */
void wl_job_op_done(struct wl_job *job);
void wl_job_finish(struct wl_job *job, uint8_t status); /* reply and free */
