/* outq: send queue of message bytes and recorded zero runs (see outq.h). */
#include "outq.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define MAX_IOV 64
#define ZERO_PAGE 65536

static const uint8_t zero_page[ZERO_PAGE]; /* never written: reads map the kernel's zero page */

void wl_outq_zeros(struct wl_outq *q, uint64_t n)
{
	if (n <= WL_INLINE_PAD) {
		wl_put_zeros(&q->data, (size_t)n);
		return;
	}
	uint64_t at = q->sent + wl_buf_avail(&q->data);
	if (q->nruns > q->run_head && q->runs[q->nruns - 1].at == at) {
		q->runs[q->nruns - 1].left += n;
		return;
	}
	if (wl_grow(&q->runs, &q->runs_cap, q->nruns, sizeof(*q->runs), 8) < 0) {
		q->data.oom = true;
		return;
	}
	q->runs[q->nruns++] = (struct wl_zrun){.at = at, .left = n};
}

bool wl_outq_empty(const struct wl_outq *q) { return wl_buf_avail(&q->data) == 0 && q->run_head == q->nruns; }

size_t wl_outq_mem(const struct wl_outq *q)
{
	return wl_buf_avail(&q->data) + (q->nruns - q->run_head) * sizeof(*q->runs);
}

static size_t min_size(uint64_t a, uint64_t b) { return (size_t)(a < b ? a : b); }

/* Advance past n sent bytes: data up to the next run, then that run's zeros. */
static void consume(struct wl_outq *q, size_t n)
{
	while (n > 0) {
		struct wl_zrun *z = q->run_head < q->nruns ? &q->runs[q->run_head] : NULL;
		size_t take = min_size(n, wl_buf_avail(&q->data));
		if (z)
			take = min_size(take, z->at - q->sent);
		q->data.off += take;
		q->sent += take;
		n -= take;
		if (n == 0 || !z)
			break;
		size_t zeros = min_size(n, z->left);
		z->left -= zeros;
		n -= zeros;
		if (z->left == 0)
			q->run_head++;
	}
	if (q->run_head == q->nruns)
		q->run_head = q->nruns = 0;
}

ssize_t wl_outq_send(struct wl_outq *q, int fd)
{
	struct iovec iov[MAX_IOV];
	int n = 0;
	size_t idx = q->data.off, r = q->run_head;
	uint64_t pos = q->sent;
	while (n < MAX_IOV) {
		uint64_t until = r < q->nruns ? q->runs[r].at : UINT64_MAX;
		size_t take = min_size(q->data.len - idx, until - pos);
		if (take) {
			iov[n++] = (struct iovec){q->data.data + idx, take};
			idx += take;
			pos += take;
		}
		if (r == q->nruns || pos != until || n == MAX_IOV)
			break; /* no more data, or no room for the run that follows */
		size_t zeros = min_size(q->runs[r].left, ZERO_PAGE);
		iov[n++] = (struct iovec){(void *)zero_page, zeros};
		if (zeros < q->runs[r].left)
			break; /* the rest of this run goes in a later call */
		r++;
	}
	if (n == 0)
		return 0;
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
	ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
	if (sent > 0)
		consume(q, (size_t)sent);
	return sent;
}

void wl_outq_trim(struct wl_outq *q)
{
	if (!wl_outq_empty(q)) {
		if (q->data.off > 0 && q->data.off >= q->data.len / 2)
			wl_buf_compact(&q->data); /* run positions count stream bytes: compaction leaves them valid */
		return;
	}
	bool oom = q->data.oom;
	if (q->data.cap > 65536)
		wl_buf_free(&q->data);
	else
		q->data.off = q->data.len = 0;
	q->data.oom = oom;
	if (q->runs_cap > 64) {
		free(q->runs);
		q->runs = NULL;
		q->runs_cap = 0;
	}
}

void wl_outq_free(struct wl_outq *q)
{
	wl_buf_free(&q->data);
	free(q->runs);
	*q = (struct wl_outq){0};
}
