/* wl-client: the load generator: the value sampler, the pairs' start and
 * join, the summary (its options: client_args.c). */
#include "client_args.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --sample: check a value spec (distribution, bounds, sequence) without a node. */
static int sample_values(struct client *cl)
{
	struct wl_value v;
	struct wl_rng rng;
	wl_set_plain_errors(true);
	int rc = wl_value_parse(cl->sample_spec, WL_UNIT_COUNT, &v, "--sample");
	wl_set_plain_errors(false);
	if (rc < 0)
		return 2;
	wl_rng_seed(&rng, cl->seed);
	double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
	for (uint64_t i = 0; i < cl->nreq; i++) {
		double x = wl_value_next(&v, &rng);
		sum += x;
		sq += x * x;
		lo = x < lo ? x : lo;
		hi = x > hi ? x : hi;
	}
	double n = (double)cl->nreq, mean = sum / n;
	printf("{\"count\":%llu,\"mean\":%.6f,\"std\":%.6f,\"min\":%.6f,\"max\":%.6f}\n",
	       (unsigned long long)cl->nreq, mean, sqrt(fmax(sq / n - mean * mean, 0)), lo, hi);
	wl_value_free(&v);
	return 0;
}

/* --conn-times: how long each session's connect() took, before the summary. */
static void print_conn_times(const struct client *cl, const struct pair *pairs)
{
	for (int i = 0; i < cl->npairs; i++)
		for (uint64_t s = 0; s < cl->nsessions; s++)
			printf("conn_time: %.1f us, thr_id: %d, sess_id: %llu\n", (double)pairs[i].conn_ns[s] / 1e3, i,
			       (unsigned long long)s);
}

static void *signal_main(void *arg)
{
	struct client *cl = arg;
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	struct timespec tick = {0, 100000000};
	while (!__atomic_load_n(&cl->stop, __ATOMIC_RELAXED)) {
		int sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig == SIGINT || sig == SIGTERM)
			__atomic_store_n(&cl->stop, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* SIGINT and SIGTERM go to the signal thread only; a closed peer is an error, not a signal. */
static int block_signals(void)
{
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0)
		return wl_err("pthread_sigmask failed"), -1;
	return 0;
}

static void pairs_free(struct pair *pairs, int npairs)
{
	for (int i = 0; i < npairs; i++) {
		free(pairs[i].recs);
		free(pairs[i].ids);
		free(pairs[i].conn_ns);
	}
	free(pairs);
}

/* Every pair with its records marked unsent, its summary and its own seed; NULL when out of memory. */
static struct pair *pairs_new(struct client *cl)
{
	struct pair *pairs = calloc((size_t)cl->npairs, sizeof(*pairs));
	if (!pairs)
		return wl_err("out of memory for %d pairs", cl->npairs), NULL;
	for (int i = 0; i < cl->npairs; i++) {
		struct pair *p = &pairs[i];
		p->cl = cl;
		p->index = i;
		p->recs = calloc(cl->nreq, sizeof(*p->recs));
		p->ids = cl->trace ? calloc(cl->nreq, sizeof(*p->ids)) : NULL;
		p->conn_ns = cl->conn_times ? calloc(cl->nsessions, sizeof(*p->conn_ns)) : NULL;
		if (!p->recs || (cl->trace && !p->ids) || (cl->conn_times && !p->conn_ns)) {
			wl_err("out of memory for %llu records", (unsigned long long)cl->nreq);
			pairs_free(pairs, i + 1);
			return NULL;
		}
		for (uint64_t k = 0; k < cl->nreq; k++) {
			p->recs[k].status = WL_ST_UNSENT;
			p->recs[k].thread = (uint16_t)i;
		}
		wl_summary_init(&p->sum);
		wl_rng_seed(&p->rng, cl->seed * 0x100000001b3ull + (uint64_t)i);
		sem_init(&p->ready, 0, 0);
		sem_init(&p->done, 0, 0);
	}
	return pairs;
}

/* Each pair's sender (and receiver, unless one thread does both). */
static int pairs_start(struct client *cl, struct pair *pairs, bool solo)
{
	/* The kernel's default 50 us of timer slack stays: senders wake up to
	 * that late (the summary's send lateness says how late), and requests
	 * due meanwhile go out in one send.  Measured with 1 ns of slack: send
	 * lateness p99 60 -> 15-30 us, but one wake-up per request, and p99
	 * latency in the milliseconds above 60k req/s instead of under 100 us
	 * up to 200k (bench/workload_bench.py, default mode). */
	cl->rt_offset_ns = wl_realtime_ns() - wl_now_ns();
	cl->start_ns = wl_now_ns() + 5000000; /* every pair starts its schedule at the same instant */
	for (int i = 0; i < cl->npairs; i++) {
		int rc = solo ? 0 : pthread_create(&pairs[i].receiver, NULL, wl_receiver_main, &pairs[i]);
		if (rc == 0)
			rc = pthread_create(&pairs[i].sender, NULL, solo ? wl_solo_main : wl_sender_main, &pairs[i]);
		if (rc != 0)
			return wl_err("pthread_create pair %d: %s", i, strerror(rc)), -1;
	}
	return 0;
}

/* Wait for one pair, count what it never sent and how late it sent the rest. */
static void pair_join(struct client *cl, struct pair *p, bool solo)
{
	pthread_join(p->sender, NULL);
	if (!solo)
		pthread_join(p->receiver, NULL);
	for (uint64_t k = 0; k < cl->nreq; k++) {
		const struct wl_record *r = &p->recs[k];
		if (r->status == WL_ST_UNSENT) {
			p->sum.unsent++;
			continue;
		}
		if (r->send_ns < p->sum.first_send_ns)
			p->sum.first_send_ns = r->send_ns;
		if (cl->pace_mode != WL_PACE_CLOSED)
			wl_hist_add(&p->sum.late, r->late_ns);
	}
}

/* --out: every pair's records, as DistWalk's format or ours; 0 or -1. */
static int write_records(struct client *cl, struct pair *pairs)
{
	const struct wl_record **recs = calloc((size_t)cl->npairs, sizeof(*recs));
	uint64_t *counts = calloc((size_t)cl->npairs, sizeof(*counts));
	int rc = -1;
	if (recs && counts) {
		for (int i = 0; i < cl->npairs; i++) {
			recs[i] = pairs[i].recs;
			counts[i] = cl->nreq;
		}
		rc = cl->dw_out.on ? wl_dw_records_write(cl->out_path, &cl->dw_out, recs, counts, cl->npairs, cl->start_ns)
				   : wl_records_write(cl->out_path, cl->out_json, recs, counts, cl->npairs, cl->start_ns);
	}
	free(recs);
	free(counts);
	return rc;
}

int main(int argc, char **argv)
{
	static struct client cl = {.npairs = 1, .nreq = 1, .nsessions = 1, .timeout_ns = 10000000000ull,
				   .seed = 1, .nodelay = true, .pace_mode = WL_PACE_CLOSED,
				   .retry_period_ns = 200000000};
	wl_set_progname("wl-client");
	wl_workload_init(&cl.wk);
	switch (wl_client_args(&cl, argc, argv)) {
	case WL_ARGS_BAD: return 2;
	case WL_ARGS_EXIT: return 0;
	case WL_ARGS_RUN: break;
	}
	if (cl.sample_spec)
		return sample_values(&cl);
	if (block_signals() < 0)
		return 1;
	int trace_rc = wl_trace_setup(cl.trace_path, "wl-client", &cl.trace); /* --trace, or the run directory */
	if (trace_rc != 0)
		return trace_rc;
	struct pair *pairs = pairs_new(&cl);
	if (!pairs)
		return 1;
	struct wl_collect *collect; /* the run directory's records and summary, if any */
	if (wl_collect_start(&collect, &cl, pairs) < 0)
		return 1;
	pthread_t sig_thread;
	if (pthread_create(&sig_thread, NULL, signal_main, &cl) != 0)
		return wl_err("pthread_create signal thread failed"), 1;
	if (cl.idle_poll && wl_idle_poll_start() < 0)
		return 1;
	bool solo = wl_pair_solo(&cl);
	if (pairs_start(&cl, pairs, solo) < 0)
		return 1;
	struct wl_summary total;
	wl_summary_init(&total);
	for (int i = 0; i < cl.npairs; i++) {
		pair_join(&cl, &pairs[i], solo);
		wl_summary_merge(&total, &pairs[i].sum);
	}
	__atomic_store_n(&cl.stop, 1, __ATOMIC_RELAXED);
	pthread_join(sig_thread, NULL);
	if (cl.conn_times)
		print_conn_times(&cl, pairs);
	wl_summary_print(stdout, &total, cl.json);
	int rc = wl_collect_finish(collect, &total) < 0 ? 1 : 0;
	if (cl.out_path && write_records(&cl, pairs) < 0)
		rc = 1;
	wl_trace_close(cl.trace);
	pairs_free(pairs, cl.npairs);
	return rc;
}
