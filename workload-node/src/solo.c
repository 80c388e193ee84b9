/* solo: a pair run as one thread, for closed-loop runs and --busy-poll.
 *
 * Closed loop: the thread that reads a reply sends the next request itself,
 * so no semaphore hands the turn from a receiver to a sender (a futex
 * wake-up and a context switch per request saved).
 *
 * --busy-poll: the thread never sleeps: it spins on the clock until the next
 * request is due and polls its socket with non-blocking recv in between.
 * With the node busy-polling too, a request costs no wake-up at all; the
 * price is a full core for this thread. */
#include "client.h"

static void solo_session(struct pair *p, struct wl_sendq *q, int fd, uint64_t lo, uint64_t hi, uint32_t session)
{
	struct client *cl = p->cl;
	bool closed = cl->pace_mode == WL_PACE_CLOSED, broken = false;
	struct wl_rx rx;
	uint64_t i = lo;
	uint64_t signal_check_ns = 0;
	wl_rx_init(&rx, fd, lo, cl->to.proto == WL_PROTO_UDP);
	for (;;) {
		if (cl->busy_poll)
			wl_spin_check_signals(&signal_check_ns);
		/* Settle what the last read brought before deciding to send: in
		 * closed loop that read is what lets the next request go. */
		uint64_t now = wl_now_ns();
		rx.lost |= broken;
		wl_rx_expire(p, &rx, now);
		bool stop = __atomic_load_n(&cl->stop, __ATOMIC_RELAXED);
		if (i < hi && !stop && !broken) {
			if (!q->have_due) {
				q->due = wl_pace_next(&q->pace, cl->start_ns, &p->rng);
				q->have_due = true;
			}
			/* closed loop: one request in flight; both: not before it is due
			 * (the common start, or the schedule) */
			bool turn = !closed || rx.cursor == i;
			if (turn && !cl->busy_poll && q->due > now) {
				wl_sleep_until(q->due, false); /* closed loop, blocking: nothing in flight */
				now = wl_now_ns();
			}
			if (turn && now >= q->due)
				i = wl_pair_send(p, q, fd, i, hi, session, &broken);
		}
		if ((i >= hi || stop || broken) && rx.cursor >= i)
			break;
		int wait_ms = 0;
		if (!cl->busy_poll) /* closed loop with blocking waits: the one request in flight */
			wait_ms = rx.cursor < i ? wl_rx_wait_ms(p, &rx, now) : 0;
		wl_rx_read(p, &rx, wait_ms);
	}
	wl_rx_free(&rx);
}

void *wl_solo_main(void *arg)
{
	wl_pair_run(arg, solo_session);
	return NULL;
}
