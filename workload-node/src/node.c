/* wl-node: the workload server. Reads its options, sets up the storage
 * thread and the workers with their sockets, starts them, then waits for
 * signals: SIGINT and SIGTERM stop it cleanly, SIGUSR1 prints the live
 * counters. */
#include "accept.h"
#include "caps.h"
#include "compute.h"
#include "node_args.h"
#include "storage.h"
#include "trace.h"
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void stop_workers(struct wl_node *node)
{
	__atomic_store_n(&node->stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < node->cfg.nthreads; i++)
		if (wl_inbox_wake(&node->workers[i].inbox) < 0)
			wl_err("wake worker %d: %s", i, strerror(errno));
	for (int i = 0; i < node->cfg.nthreads; i++)
		pthread_join(node->workers[i].thread, NULL);
}

/* The command line and what it needs checked before any thread exists:
 * true to run, else false with the exit status in *status. */
static bool configure(struct wl_node_cfg *cfg, int argc, char **argv, int *status)
{
	wl_caps_defaults(cfg);
	switch (wl_node_args(cfg, argc, argv)) {
	case WL_ARGS_BAD: *status = 2; return false;
	case WL_ARGS_EXIT: *status = 0; return false;
	case WL_ARGS_RUN: break;
	}
	*status = 1;
	if (cfg->cpus_auto && allowed_cpus(cfg) < 0)
		return false;
	return wl_caps_fd_budget(cfg) == 0;
}

/* Block the signals main waits for before any thread exists, so that only its sigwait sees them. */
static int block_signals(sigset_t *sigs)
{
	sigemptyset(sigs);
	sigaddset(sigs, SIGINT);
	sigaddset(sigs, SIGTERM);
	sigaddset(sigs, SIGUSR1);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_sigmask(SIG_BLOCK, sigs, NULL) != 0)
		return wl_err("pthread_sigmask failed");
	return 0;
}

/* Everything the workers need, then their threads, which wait at the barrier. */
static int start_workers(struct wl_node *node, struct wl_trace *trace)
{
	const struct wl_node_cfg *cfg = &node->cfg;
	node->workers = calloc((size_t)cfg->nthreads, sizeof(*node->workers));
	if (!node->workers)
		return wl_err("out of memory for %d workers", cfg->nthreads);
	if (cfg->loops_per_us <= 0)
		wl_compute_calibrate();
	wl_compute_loops(cfg->loops_per_us);
	if (wl_accept_open(node) < 0 || wl_storage_open(node) < 0)
		return -1;
	for (int i = 0; i < cfg->nthreads; i++) {
		struct wl_worker *w = &node->workers[i];
		w->trace = trace;
		if (wl_worker_init(w, node, i) < 0 || wl_accept_attach(node, w) < 0)
			return -1;
	}
	if (pthread_barrier_init(&node->started, NULL, (unsigned)cfg->nthreads + 1) != 0)
		return wl_err("pthread_barrier_init failed");
	for (int i = 0; i < cfg->nthreads; i++) {
		int rc = pthread_create(&node->workers[i].thread, NULL, worker_thread, &node->workers[i]);
		if (rc != 0)
			return wl_err("pthread_create worker %d: %s", i, strerror(rc));
	}
	return 0;
}

/* A worker that could not take its CPU or policy fails the start: serving
 * under a policy other than the one asked would skew results. The workers
 * start serving only after the announcement: a busy-polling worker at a
 * real-time priority on main's core would otherwise keep main from ever
 * printing it. False (the workers stopped) if one failed. */
static bool workers_ready(struct wl_node *node)
{
	pthread_barrier_wait(&node->started);
	bool failed = false;
	for (int i = 0; i < node->cfg.nthreads; i++)
		failed |= node->workers[i].setup_rc < 0;
	if (failed)
		__atomic_store_n(&node->stop, 1, __ATOMIC_RELAXED);
	else
		wl_accept_announce(node);
	pthread_barrier_wait(&node->started);
	if (failed)
		stop_workers(node);
	return !failed;
}

/* Serve until SIGINT or SIGTERM; SIGUSR1 prints the counters meanwhile. */
static void wait_for_stop(struct wl_node *node, const sigset_t *sigs)
{
	for (;;) {
		int sig;
		if (sigwait(sigs, &sig) != 0)
			continue;
		if (sig != SIGUSR1)
			return;
		print_stats(node, "stats");
	}
}

int main(int argc, char **argv)
{
	static struct wl_node node = {.cfg = {.nthreads = 1, .backlog = 1024, .nodelay = true,
					      .storage_max_bytes = 1ull << 30, .psync_period_ns = 100000000,
					      .loops_per_us = -1}};
	int status;
	sigset_t sigs;
	struct wl_trace *trace = NULL;
	wl_set_progname("wl-node");
	if (!configure(&node.cfg, argc, argv, &status))
		return status;
	if (block_signals(&sigs) < 0)
		return 1;
	int trace_rc = wl_trace_setup(node.cfg.trace_path, "wl-node", &trace); /* --trace, or the run directory */
	if (trace_rc != 0)
		return trace_rc;
	if (start_workers(&node, trace) < 0 || !workers_ready(&node))
		return 1;
	if (node.cfg.idle_poll && wl_idle_poll_start() < 0) {
		stop_workers(&node);
		return 1;
	}
	pthread_t acceptor;
	bool has_acceptor = node.cfg.accept_mode == WL_AM_PARENT;
	if (has_acceptor && wl_accept_start(&node, &acceptor) < 0)
		return 1;
	wait_for_stop(&node, &sigs);
	stop_workers(&node);
	if (has_acceptor)
		pthread_join(acceptor, NULL);
	print_stats(&node, "final");
	wl_storage_close(node.storage);
	node.storage = NULL;
	wl_trace_close(trace);
	return 0;
}
