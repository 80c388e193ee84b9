/* outq: a connection's send queue. Message bytes are stored; long runs of
 * zero padding (a reply's or a forwarded request's) are only recorded and
 * sent from a shared zero page, so a request for a 16 MiB reply costs the
 * node 48 bytes of memory instead of 16 MiB, however slowly its client reads. */
#pragma once
#include "util.h"

#include <sys/types.h>

#define WL_INLINE_PAD 4096 /* padding up to this many bytes is stored like message bytes */

struct wl_zrun {
	uint64_t at;   /* the zeros follow this many data bytes of the stream */
	uint64_t left; /* zeros still to send */
};

struct wl_outq {
	struct wl_buf data; /* message bytes; encoders append to it directly */
	uint64_t sent;      /* data bytes sent so far: the stream position of data.off */
	struct wl_zrun *runs;
	size_t run_head, nruns, runs_cap;
};

/* Append n zero bytes to the message being encoded. Allocation failure is
 * sticky in q->data (see wl_enc_ok), like every encoder's. */
void wl_outq_zeros(struct wl_outq *q, uint64_t n);
bool wl_outq_empty(const struct wl_outq *q);
size_t wl_outq_mem(const struct wl_outq *q); /* bytes of memory the unsent part holds */
/* One sendmsg of what is queued: bytes sent, or -1 with errno (EAGAIN included). */
ssize_t wl_outq_send(struct wl_outq *q, int fd);
void wl_outq_trim(struct wl_outq *q); /* between whole messages: release or compact */
void wl_outq_free(struct wl_outq *q);
