/* rxstamp: when the kernel received what a read returns, for the spans
 * (trace.h). A process that reads a request or a reply does so some time
 * after it arrived: its own wake-up, or a worker busy with something else.
 * Spans timed at the read count that delay as network; timed at the
 * kernel's receive, they leave it to the reader, as a wait.
 *
 * Only a tracing process asks for this: an untraced one sets no socket
 * option and reads with plain recv, so its fast path is unchanged. */
#pragma once
#include "util.h"

#include <sys/socket.h>
#include <sys/types.h>

/* Ask the kernel to stamp what fd receives (SO_TIMESTAMPNS: software
 * receive timestamps, CLOCK_REALTIME, taken as each packet arrives). A
 * refusal is said once per process and costs nothing else: the reads of fd
 * then give the read's own time. 0, or -1 if refused. */
int wl_rxstamp_enable(int fd);

/* When what a read returned arrived, and when it was read (CLOCK_REALTIME ns). */
struct wl_rx_stamp {
	uint64_t kernel_rt_ns; /* the kernel's receive: a datagram's own, for TCP the last segment the read took */
	uint64_t read_rt_ns;   /* just after the read returned */
};

/* recv (recvfrom when from is not NULL) that also says when what it read
 * arrived. Without the kernel's stamp (not enabled, refused, no control
 * message, a stamp later than the read) kernel_rt_ns is the read's time.
 * *at is set only when bytes came. */
ssize_t wl_recv_stamped(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen,
			struct wl_rx_stamp *at);
