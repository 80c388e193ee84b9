/* rxstamp: software receive timestamps from recvmsg's control messages. */
#include "rxstamp.h"

#include <errno.h>
#include <string.h>
#include <time.h>

int wl_rxstamp_enable(int fd)
{
	static int said;
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) == 0)
		return 0;
	int err = errno;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		wl_err("setsockopt(fd %d, SO_TIMESTAMPNS): %s: spans are timed at each read, so the network times in "
		       "the trace include the reading process's wake-ups",
		       fd, strerror(err));
	return -1;
}

/* The SCM_TIMESTAMPNS control message of msg, in ns; 0 if there is none. */
static uint64_t kernel_stamp(struct msghdr *msg)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
		    c->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
			continue;
		struct timespec ts;
		memcpy(&ts, CMSG_DATA(c), sizeof(ts)); /* CMSG_DATA need not be aligned for a timespec */
		if (ts.tv_sec <= 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)
			return 0;
		return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	return 0;
}

ssize_t wl_recv_stamped(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen,
			struct wl_rx_stamp *at)
{
	union {
		char bytes[CMSG_SPACE(sizeof(struct timespec))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr msg = {.msg_name = from, .msg_namelen = from && fromlen ? *fromlen : 0, .msg_iov = &iov,
			     .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof(control.bytes)};
	ssize_t n = recvmsg(fd, &msg, flags);
	if (n <= 0)
		return n;
	if (from && fromlen)
		*fromlen = msg.msg_namelen;
	uint64_t read_ns = wl_realtime_ns(), stamp = kernel_stamp(&msg);
	/* A stamp after the read means the clock was stepped back meanwhile. */
	*at = (struct wl_rx_stamp){.kernel_rt_ns = stamp && stamp <= read_ns ? stamp : read_ns, .read_rt_ns = read_ns};
	return n;
}
