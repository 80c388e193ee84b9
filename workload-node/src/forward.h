/* forward: the FORWARD op (forward.c says how). job.c starts one; the loop
 * (worker.c, drain.c) hands it the replies it reads and its deadlines, and
 * gets back the jobs whose FORWARD settled, to continue them
 * (wl_job_op_done). It calls outbound.c for its connections, flow.c and
 * conn.c to send on them, and spans.c. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wl_worker;
struct wl_conn;
struct wl_job;

/* One send of a FORWARD to one target, waiting for its reply. */
struct wl_pending {
	struct wl_job *job;
	struct wl_conn *conn;
	uint32_t gen;
	uint8_t target, attempt;
	bool in_use, failed; /* failed: connection error, settle as ERR at next sweep */
	uint64_t deadline_ns;
	uint8_t span_id[8];
	uint64_t start_rt_ns;
};

/* A worker's pending sends (in struct wl_worker): forward.c's alone. */
struct wl_fwds {
	struct wl_pending *pend; /* by slot */
	uint32_t cap, inuse;
};

void wl_fwd_start(struct wl_job *job);
/* A reply read off an outbound connection (its header and status: len is
 * WL_REPLY_MIN); rx_rt_ns: when it arrived, when tracing. The job whose
 * FORWARD it settled, or NULL. */
struct wl_job *wl_fwd_on_reply(struct wl_worker *w, const uint8_t *msg, size_t len, uint64_t rx_rt_ns);
/* Settle the sends due by now_ns (timed out, or their connection failed),
 * retrying where the op allows: the jobs whose FORWARD this settled, a list
 * through next. */
struct wl_job *wl_fwd_sweep(struct wl_worker *w, uint64_t now_ns);
int wl_fwd_timeout_ms(struct wl_worker *w, uint64_t now_ns); /* -1: nothing pending */
/* Outbound connections closed during this loop pass (conn.c closes them
 * without telling anyone): their pending sends fail, to be settled as ERR
 * by the next sweep, and they leave the cache (outbound.h). Before the
 * loop frees them (wl_conn_reap); a sweep does it first too. */
void wl_fwd_forget_closed(struct wl_worker *w);
