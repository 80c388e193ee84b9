/* wl-node: the workload server. Options, sockets per accept mode, worker
 * threads, the storage thread, and signals (SIGINT/SIGTERM stop cleanly,
 * SIGUSR1 prints live counters). */
#include "caps.h"
#include "compute.h"
#include "node_args.h"
#include "storage.h"
#include "trace.h"
#include "units.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --thread-affinity auto: worker i on the i-th CPU this process may use. */
static int allowed_cpus(struct wl_node_cfg *cfg)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return wl_err("--thread-affinity auto: sched_getaffinity: %s", strerror(errno));
	cfg->ncpus = 0;
	for (int c = 0; c < CPU_SETSIZE && cfg->ncpus < WL_MAX_CPUS; c++)
		if (CPU_ISSET(c, &set))
			cfg->cpus[cfg->ncpus++] = c;
	return 0;
}

static void *worker_thread(void *arg)
{
	struct wl_worker *w = arg;
	const struct wl_node_cfg *cfg = &w->node->cfg;
	char who[32];
	snprintf(who, sizeof(who), "worker %d", w->index);
	w->setup_rc = 0;
	if (cfg->ncpus && wl_pin_thread(cfg->cpus[w->index % cfg->ncpus], who) < 0)
		w->setup_rc = -1;
	if (w->setup_rc == 0 && wl_sched_apply(&cfg->sched, who) < 0)
		w->setup_rc = -1;
	pthread_barrier_wait(&w->node->started); /* 1: set up (or not) */
	pthread_barrier_wait(&w->node->started); /* 2: main has checked and announced */
	if (w->setup_rc < 0 || __atomic_load_n(&w->node->stop, __ATOMIC_RELAXED))
		return NULL;
	return wl_worker_main(w);
}

static void print_stats(struct wl_node *node, const char *when)
{
	struct wl_counters t = {0};
	for (int i = 0; i < node->cfg.nthreads; i++) {
		uint64_t *dst = (uint64_t *)&t, *src = (uint64_t *)&node->workers[i].ctr;
		for (size_t k = 0; k < sizeof(t) / sizeof(uint64_t); k++)
			dst[k] += __atomic_load_n(&src[k], __ATOMIC_RELAXED);
	}
	wl_storage_counters(node->storage, &t.fsyncs, &t.storage_errors);
	fprintf(stderr,
		"wl-node: %s requests=%" PRIu64 " replies=%" PRIu64 " malformed=%" PRIu64 " truncated=%" PRIu64
		" oversized=%" PRIu64 " accepted=%" PRIu64 " closed=%" PRIu64 " forwards=%" PRIu64
		" fwd_timeouts=%" PRIu64 " fwd_errors=%" PRIu64 " fwd_retries=%" PRIu64 " loads=%" PRIu64
		" stores=%" PRIu64 " fsyncs=%" PRIu64 " storage_errors=%" PRIu64 " bytes_in=%" PRIu64
		" bytes_out=%" PRIu64 " over_reply=%" PRIu64 " over_request=%" PRIu64 " over_compute=%" PRIu64
		" over_backlog=%" PRIu64 " over_conns=%" PRIu64 " over_fwd_conns=%" PRIu64 " paused=%" PRIu64
		" fwd_closed=%" PRIu64 "\n",
		when, t.requests, t.replies, t.malformed, t.truncated, t.oversized, t.accepted, t.closed, t.forwards,
		t.fwd_timeouts, t.fwd_errors, t.fwd_retries, t.loads, t.stores, t.fsyncs, t.storage_errors, t.bytes_in,
		t.bytes_out, t.over_reply, t.over_request, t.over_compute, t.over_backlog, t.over_conns,
		t.over_fwd_conns, t.paused, t.fwd_closed);
}

/* Port 0 means "any free port": bind once, then reuse the chosen port for the
 * other sockets of the same address (child mode binds one per worker). */
static int open_socket(struct wl_addr *a, int backlog, bool reuseport)
{
	int fd = wl_listen(a, backlog, reuseport);
	if (fd >= 0 && wl_addr_port(a) == 0) {
		a->salen = sizeof(a->sa);
		if (getsockname(fd, (struct sockaddr *)&a->sa, &a->salen) < 0) {
			close(fd);
			return wl_err("getsockname on %s: %s", a->text, strerror(errno));
		}
	}
	return fd;
}

static int setup_worker(struct wl_node *node, int i)
{
	struct wl_worker *w = &node->workers[i];
	if (wl_worker_init(w, node, i) < 0)
		return -1;
	for (int b = 0; b < node->cfg.nbinds; b++) {
		struct wl_addr *a = &node->cfg.binds[b];
		bool udp = a->proto == WL_PROTO_UDP;
		int fd;
		if (node->cfg.accept_mode == WL_AM_CHILD) {
			if ((fd = open_socket(a, node->cfg.backlog, true)) < 0)
				return -1;
		} else if (node->cfg.accept_mode == WL_AM_PARENT && !udp) {
			continue; /* the acceptor thread owns TCP listeners */
		} else {
			fd = node->listen_fds[b];
		}
		if (!wl_conn_new(w, udp ? WL_CONN_UDP : WL_CONN_LISTEN, fd, WL_EV_IN))
			return -1;
	}
	return 0;
}

/* Parent accept mode: one thread accepts and deals connections round-robin. */
static void *acceptor_thread(void *arg)
{
	struct wl_node *node = arg;
	struct pollfd pf[WL_MAX_BINDS];
	int n = 0, next = 0;
	for (int b = 0; b < node->cfg.nbinds; b++)
		if (node->cfg.binds[b].proto == WL_PROTO_TCP)
			pf[n++] = (struct pollfd){.fd = node->listen_fds[b], .events = POLLIN};
	while (!__atomic_load_n(&node->stop, __ATOMIC_RELAXED)) {
		if (poll(pf, (nfds_t)n, 100) < 0 && errno != EINTR) {
			wl_err("acceptor: poll: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			if (!(pf[i].revents & POLLIN))
				continue;
			int fd = accept4(pf[i].fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				continue;
			struct wl_worker *w = &node->workers[next++ % node->cfg.nthreads];
			if (!wl_conn_admit(w)) {
				close(fd); /* over --max-conns */
				continue;
			}
			if (node->cfg.nodelay && wl_set_nodelay(fd) < 0) {
				wl_conn_unadmit(node);
				close(fd);
				continue;
			}
			if (wl_inbox_post_fd(&w->inbox, fd) < 0) {
				wl_conn_unadmit(node);
				close(fd);
				continue;
			}
			if (wl_inbox_wake(&w->inbox) < 0)
				wl_err("acceptor: wake worker %d: %s", w->index, strerror(errno));
		}
	}
	return NULL;
}

static int open_shared_sockets(struct wl_node *node)
{
	for (int b = 0; b < node->cfg.nbinds; b++) {
		node->listen_fds[b] = -1;
		if (node->cfg.accept_mode == WL_AM_CHILD)
			continue;
		if ((node->listen_fds[b] = open_socket(&node->cfg.binds[b], node->cfg.backlog, false)) < 0)
			return -1;
	}
	return 0;
}

static void stop_workers(struct wl_node *node)
{
	__atomic_store_n(&node->stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < node->cfg.nthreads; i++)
		if (wl_inbox_wake(&node->workers[i].inbox) < 0)
			wl_err("wake worker %d: %s", i, strerror(errno));
	for (int i = 0; i < node->cfg.nthreads; i++)
		pthread_join(node->workers[i].thread, NULL);
}

static void announce(const struct wl_node *node)
{
	static const char *const am[] = {"child", "shared", "parent"};
	for (int b = 0; b < node->cfg.nbinds; b++) {
		const struct wl_addr *a = &node->cfg.binds[b];
		char host[64] = "?";
		const void *raw = a->sa.ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)&a->sa)->sin6_addr
							      : (const void *)&((const struct sockaddr_in *)&a->sa)->sin_addr;
		inet_ntop(a->sa.ss_family, raw, host, sizeof(host));
		fprintf(stderr, "wl-node: listening on %s://%s:%u (%d workers, accept mode %s)\n",
			a->proto == WL_PROTO_UDP ? "udp" : "tcp", host, wl_addr_port(a), node->cfg.nthreads,
			am[node->cfg.accept_mode]);
	}
}

int main(int argc, char **argv)
{
	static struct wl_node node = {.cfg = {.nthreads = 1, .backlog = 1024, .nodelay = true,
					      .storage_max_bytes = 1ull << 30, .psync_period_ns = 100000000,
					      .loops_per_us = -1}};
	wl_set_progname("wl-node");
	wl_caps_defaults(&node.cfg);
	switch (wl_node_args(&node.cfg, argc, argv)) {
	case WL_ARGS_BAD: return 2;
	case WL_ARGS_EXIT: return 0;
	case WL_ARGS_RUN: break;
	}
	if (node.cfg.cpus_auto && allowed_cpus(&node.cfg) < 0)
		return 1;
	if (wl_caps_fd_budget(&node.cfg) < 0)
		return 1;
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	signal(SIGPIPE, SIG_IGN);
	/* Block before any thread exists so that only sigwait below sees them. */
	if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0)
		return wl_err("pthread_sigmask failed"), 1;
	struct wl_trace *trace = NULL;
	int trace_rc = wl_trace_setup(node.cfg.trace_path, "wl-node", &trace); /* --trace, or the run directory */
	if (trace_rc != 0)
		return trace_rc;
	node.workers = calloc((size_t)node.cfg.nthreads, sizeof(*node.workers));
	if (!node.workers)
		return wl_err("out of memory for %d workers", node.cfg.nthreads), 1;
	if (node.cfg.loops_per_us <= 0)
		wl_compute_calibrate();
	wl_compute_loops(node.cfg.loops_per_us);
	if (open_shared_sockets(&node) < 0 || wl_storage_open(&node) < 0)
		return 1;
	for (int i = 0; i < node.cfg.nthreads; i++) {
		node.workers[i].trace = trace;
		if (setup_worker(&node, i) < 0)
			return 1;
	}
	if (pthread_barrier_init(&node.started, NULL, (unsigned)node.cfg.nthreads + 1) != 0)
		return wl_err("pthread_barrier_init failed"), 1;
	for (int i = 0; i < node.cfg.nthreads; i++) {
		int rc = pthread_create(&node.workers[i].thread, NULL, worker_thread, &node.workers[i]);
		if (rc != 0)
			return wl_err("pthread_create worker %d: %s", i, strerror(rc)), 1;
	}
	/* A worker that could not take its CPU or policy fails the start:
	 * serving under a policy other than the one asked would skew results.
	 * The workers start serving only after the announcement: a busy-polling
	 * worker at a real-time priority on main's core would otherwise keep
	 * main from ever printing it. */
	pthread_barrier_wait(&node.started);
	bool failed = false;
	for (int i = 0; i < node.cfg.nthreads; i++)
		failed |= node.workers[i].setup_rc < 0;
	if (failed)
		__atomic_store_n(&node.stop, 1, __ATOMIC_RELAXED);
	else
		announce(&node);
	pthread_barrier_wait(&node.started);
	if (failed) {
		stop_workers(&node);
		return 1;
	}
	if (node.cfg.idle_poll && wl_idle_poll_start() < 0) {
		stop_workers(&node);
		return 1;
	}
	pthread_t acceptor;
	bool has_acceptor = node.cfg.accept_mode == WL_AM_PARENT;
	if (has_acceptor && pthread_create(&acceptor, NULL, acceptor_thread, &node) != 0)
		return wl_err("pthread_create acceptor failed"), 1;
	for (;;) {
		int sig;
		if (sigwait(&sigs, &sig) != 0)
			continue;
		if (sig == SIGUSR1) {
			print_stats(&node, "stats");
			continue;
		}
		break;
	}
	stop_workers(&node);
	if (has_acceptor)
		pthread_join(acceptor, NULL);
	print_stats(&node, "final");
	wl_storage_close(node.storage);
	node.storage = NULL;
	wl_trace_close(trace);
	return 0;
}
