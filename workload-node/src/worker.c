/* worker: one event loop per worker thread (see worker.h). The loop waits
 * for its sockets, hands what they bring to the reader, accepts client
 * connections, takes what other threads post to its inbox, and at the end
 * of each pass expires forwards, closes idle outbound connections, sends
 * the replies made and frees the connections closed. A job never blocks
 * the loop except inside COMPUTE, which is the point of COMPUTE. */
#include "worker.h"
#include "flow.h"
#include "reader.h"
#include "spans.h"
#include "trace.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EVENTS 256

/* Tracing: the client's address, for the wl.peer of its requests' spans. A
 * client that is already gone has none to give; its spans go without. */
static void note_peer(struct wl_conn *c)
{
	socklen_t len = sizeof(c->peer.sa);
	c->peer.salen = getpeername(c->fd, (struct sockaddr *)&c->peer.sa, &len) == 0 ? len : 0;
}

/* An accepted client connection, already admitted, joins this worker. */
static void adopt(struct wl_worker *w, int fd)
{
	struct wl_conn *in = wl_conn_new(w, WL_CONN_IN, fd, WL_EV_IN);
	if (!in) {
		close(fd);
		return;
	}
	if (w->trace)
		note_peer(in);
	WL_COUNT(w, accepted, 1);
}

static void on_listen(struct wl_conn *c)
{
	struct wl_worker *w = c->w;
	for (;;) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				wl_err("worker %d: accept: %s", w->index, strerror(errno));
			return;
		}
		if (!wl_conn_admit(w)) {
			close(fd); /* over --max-conns: closed at once, before it costs anything */
			continue;
		}
		if (w->node->cfg.nodelay && wl_set_nodelay(fd) < 0) {
			wl_conn_unadmit(w->node);
			close(fd);
			continue;
		}
		adopt(w, fd);
	}
}

static void on_wake(struct wl_worker *w)
{
	int fds[64];
	size_t nfds;
	struct wl_job *jobs = wl_inbox_take(&w->inbox, fds, 64, &nfds);
	for (size_t i = 0; i < nfds; i++)
		adopt(w, fds[i]);
	while (jobs) {
		struct wl_job *j = jobs;
		jobs = j->next;
		if (w->trace)
			wl_spans_op(j, j->op_status, wl_realtime_ns());
		wl_job_op_done(j);
	}
}

/* The jobs whose FORWARD a sweep settled (a list through next), in order. */
static void continue_jobs(struct wl_job *jobs)
{
	while (jobs) {
		struct wl_job *j = jobs;
		jobs = j->next;
		wl_job_op_done(j);
	}
}

static void dispatch(struct wl_worker *w, const struct wl_event *evs, int n)
{
	for (int i = 0; i < n; i++) {
		struct wl_conn *c = evs[i].ptr;
		if (c->dead)
			continue;
		switch (c->kind) {
		case WL_CONN_LISTEN: on_listen(c); break;
		case WL_CONN_UDP: wl_reader_udp(c); break;
		case WL_CONN_WAKE: on_wake(w); break;
		case WL_CONN_IN:
		case WL_CONN_OUT: wl_reader_stream(c, evs[i].events); break;
		}
	}
}

/* After the events of a pass. Expire only what was overdue before the wait
 * (polled_ns): a reply that arrived while this worker was busy (in
 * COMPUTE, say) was reported by that wait and has just been handled, so it
 * is not mistaken for a timeout. */
static void end_pass(struct wl_worker *w, uint64_t polled_ns)
{
	if (w->conns.nbacklog)
		wl_reader_backlog(w);
	if (w->fwd.inuse)
		continue_jobs(wl_fwd_sweep(w, polled_ns));
	if (w->outs.n)
		wl_out_close_idle(w, wl_now_ns());
	wl_flow_send_queued(w);
	wl_fwd_forget_closed(w); /* before the connections closed in this pass are freed */
	wl_conn_reap(w);
}

int wl_worker_init(struct wl_worker *w, struct wl_node *node, int index)
{
	w->index = index;
	w->node = node;
	if (wl_poller_init(&w->poller, node->cfg.poll_mode) < 0 || wl_inbox_init(&w->inbox, index) < 0)
		return -1;
	w->wake = (struct wl_conn){.kind = WL_CONN_WAKE, .fd = w->inbox.fd, .w = w};
	return wl_poller_add(&w->poller, w->inbox.fd, WL_EV_IN, &w->wake, false);
}

void *wl_worker_main(void *arg)
{
	struct wl_worker *w = arg;
	struct wl_event evs[MAX_EVENTS];
	uint64_t signal_check_ns = 0, last_event_ns = 0;
	const struct wl_node_cfg *cfg = &w->node->cfg;
	while (!__atomic_load_n(&w->node->stop, __ATOMIC_RELAXED)) {
		uint64_t now = wl_now_ns();
		/* --busy-poll-for: right after traffic more is likely; polling for
		 * it a bounded while saves a wake-up without burning an idle core. */
		bool spin = cfg->busy_poll || now < last_event_ns + cfg->poll_window_ns;
		if (spin)
			wl_spin_check_signals(&signal_check_ns);
		/* Busy polling trades a core for the wakeup latency of a blocking
		 * wait. It yields only for a pending signal: under CFS a yield hands
		 * the core to any neighbour for a whole slice, and the scheduler
		 * preempts a spinner anyway when something else is due. */
		int timeout = spin || w->conns.nbacklog ? 0 : wl_fwd_timeout_ms(w, now);
		uint64_t polled_ns = now;
		int n = wl_poller_wait(&w->poller, evs, MAX_EVENTS, timeout);
		if (n < 0)
			break;
		if (n > 0 && cfg->poll_window_ns)
			last_event_ns = wl_now_ns();
		dispatch(w, evs, n);
		end_pass(w, polled_ns);
	}
	return NULL;
}
