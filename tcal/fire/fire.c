/* See fire.h. */
#define _GNU_SOURCE
#include "fire.h"

#include <errno.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define DATAGRAM_MAX 65536

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleep until the deadline: one long sleep to shortly before it, then short
 * steps.  A virtual CPU idle for the whole wait is halted, and waking it
 * took milliseconds here (bench/events_bench.py, quiet host: wake p99
 * 1.9 ms, once 22 ms; with the short steps 0.07-0.10 ms). */
#define CLOSE_IN_NS 2000000
#define STEP_NS 100000

static void sleep_abs(int64_t t_ns)
{
	struct timespec ts = { .tv_sec = t_ns / 1000000000, .tv_nsec = t_ns % 1000000000 };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void sleep_until(int64_t deadline_ns)
{
	int64_t now = now_ns();
	if (deadline_ns - now > CLOSE_IN_NS)
		sleep_abs(deadline_ns - CLOSE_IN_NS);
	while ((now = now_ns()) < deadline_ns)
		sleep_abs(deadline_ns - now > STEP_NS ? now + STEP_NS : deadline_ns);
}

static int send_all(int fd, const uint8_t *data, uint64_t len)
{
	while (len > 0) {
		ssize_t sent = send(fd, data, len, 0);
		if (sent < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd p = { .fd = fd, .events = POLLOUT };
				poll(&p, 1, 1000);
				continue;
			}
			return errno;
		}
		data += sent;
		len -= (uint64_t)sent;
	}
	return 0;
}

/* True if the datagram holds the answer to `last_seq` (the batch's ACK). */
static int holds_last(const uint8_t *data, size_t len, uint32_t last_seq)
{
	size_t off = 0;
	while (off + sizeof(struct nlmsghdr) <= len) {
		struct nlmsghdr h;
		memcpy(&h, data + off, sizeof(h));
		if (h.nlmsg_len < sizeof(h))
			return 0;
		if (h.nlmsg_type == NLMSG_ERROR && h.nlmsg_seq == last_seq)
			return 1;
		off += NLMSG_ALIGN(h.nlmsg_len);
	}
	return 0;
}

/* Read answers until the batch's ACK; keep them in batch->reply.  Each
 * datagram is read whole into a scratch buffer and copied over, so a batch's
 * reply buffer needs room for its answers only (an error each at most),
 * not for a largest datagram: a step of 400 one-request batches no longer
 * allocates 400 buffers of 128 KiB. */
static int read_answers(struct cx_fire_batch *b, int32_t timeout_ms)
{
	static __thread uint8_t scratch[DATAGRAM_MAX];
	int overflow = 0;
	for (;;) {
		ssize_t got = recv(b->fd, scratch, DATAGRAM_MAX, MSG_DONTWAIT | MSG_TRUNC);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				struct pollfd p = { .fd = b->fd, .events = POLLIN };
				int ready = poll(&p, 1, timeout_ms);
				if (ready == 0)
					return ETIMEDOUT;
				if (ready < 0 && errno != EINTR)
					return errno;
				continue;
			}
			return errno;
		}
		size_t len = (size_t)got;
		if (len > DATAGRAM_MAX) { /* cut short: its messages cannot be read whole */
			overflow = 1;
			len = DATAGRAM_MAX;
		}
		if (!overflow && b->reply_cap - b->reply_len >= NLMSG_ALIGN(len)) {
			memcpy(b->reply + b->reply_len, scratch, len);
			b->reply_len += NLMSG_ALIGN(len); /* the next datagram starts aligned, as a message would */
		} else {
			overflow = 1;
		}
		if (holds_last(scratch, len, b->last_seq))
			return overflow ? ENOBUFS : 0;
	}
}

void cx_fire(int64_t deadline_ns, struct cx_fire_signal *signals, uint64_t n_signals,
	     struct cx_fire_batch *batches, uint64_t n_batches, int32_t reply_timeout_ms,
	     int64_t times[3])
{
	sleep_until(deadline_ns);
	times[0] = now_ns();
	for (uint64_t i = 0; i < n_signals; i++)
		signals[i].error = kill(-signals[i].pgid, signals[i].sig) == 0 ? 0 : errno;
	for (uint64_t i = 0; i < n_batches; i++) {
		batches[i].reply_len = 0;
		batches[i].error = send_all(batches[i].fd, batches[i].request, batches[i].request_len);
	}
	/* In force: rtnetlink handled every request inside its send.  Reading
	 * the answers (which say what was refused) comes after, and at 400
	 * namespaces took 1-2 ms of its own. */
	times[1] = now_ns();
	for (uint64_t i = 0; i < n_batches; i++)
		if (batches[i].error == 0)
			batches[i].error = read_answers(&batches[i], reply_timeout_ms);
	times[2] = now_ns();
}
