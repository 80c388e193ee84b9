/* spans: the node's spans in its trace (spans.c lists them). Called only
 * when the worker traces, by the loop (worker.c, drain.c), job.c and
 * forward.c; calls only trace.c. status is a wl.status (trace.h). */
#pragma once
#include "conn.h"
#include "forward.h"
#include "job.h"

/* The job's ids and start (the kernel's receive of its last byte, when rx_at has it). */
void wl_spans_job_init(struct wl_job *job, const struct wl_hdr *hdr, const struct wl_rx_stamp *rx_at);
void wl_spans_serve(const struct wl_job *job, int status, uint32_t reply_bytes, uint64_t end_rt_ns);
void wl_spans_op(const struct wl_job *job, int status, uint64_t end_rt_ns); /* COMPUTE, LOAD, STORE */
void wl_spans_forward(const struct wl_job *job, int status, uint64_t end_rt_ns);
/* reply_rt_ns: the kernel's receive of the reply that settles it; 0 without a reply */
void wl_spans_forward_send(const struct wl_pending *p, int status, uint64_t end_rt_ns, uint64_t reply_rt_ns);
void wl_spans_refused(struct wl_conn *c, const struct wl_hdr *hdr); /* over --max-request, never read */
