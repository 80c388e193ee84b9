/* cx_fire: apply a prepared step at one instant, outside Python.
 *
 * A timeline step is prepared ahead of its time (netlink requests encoded,
 * process groups to signal); cx_fire sleeps until the step's deadline on the
 * monotonic clock, signals, sends each namespace's batch, and reads the
 * kernel's answers.  The caller's interpreter lock is released for all of
 * it (ctypes), so no other Python thread can hold the step up.
 *
 * rtnetlink handles a request inside the sendmsg call that carries it: when
 * the last send returns, the step is in force; the answers only tell which
 * requests the kernel refused.
 */
#ifndef CX_FIRE_H
#define CX_FIRE_H

#include <stddef.h>
#include <stdint.h>

struct cx_fire_signal {
	int32_t pgid;  /* process group to signal */
	int32_t sig;
	int32_t error; /* out: 0 or errno of kill() */
};

struct cx_fire_batch {
	int32_t fd;             /* a NETLINK_ROUTE socket, already in its namespace */
	uint32_t last_seq;      /* sequence number of the request that asks for the ACK */
	const uint8_t *request; /* the encoded requests, back to back */
	uint64_t request_len;
	uint8_t *reply;         /* out: every answer datagram, back to back */
	uint64_t reply_cap;
	uint64_t reply_len;     /* out */
	int32_t error;          /* out: 0, or errno of send/recv (ENOBUFS: reply overflow, ETIMEDOUT) */
};

/* times[0]: when the deadline was reached (woken); times[1]: when the last
 * batch was sent (the step is in force); times[2]: when the last answer was
 * read.  CLOCK_MONOTONIC in ns, like Python's time.monotonic_ns(). */
void cx_fire(int64_t deadline_ns, struct cx_fire_signal *signals, uint64_t n_signals,
	     struct cx_fire_batch *batches, uint64_t n_batches, int32_t reply_timeout_ms,
	     int64_t times[3]);

#endif
