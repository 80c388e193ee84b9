/* wl-client: the load generator: options, the value sampler, the pairs'
 * start and join, the summary. */
#include "client.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: wl-client [options] [operations]\n"
	"  --to ADDR              first node: [tcp://|udp://]host[:port] (default 127.0.0.1:7891)\n"
	"  --resolve NAME=ADDR    map a host name (in --to and -F) to addr[:port], repeatable\n"
	"  --nt N                 sender/receiver thread pairs (default 1)\n"
	"  -n N                   requests per pair (default 1)\n"
	"  --ns N                 sessions per pair: reconnect between (default 1)\n"
	"  -r RATE                requests/s per pair: number, distribution, aseq/gseq ramp\n"
	"  -p PERIOD              inter-request period per pair (bare = us); closed loop if no -r/-p\n"
	"  --rss TIME             rate step duration of a ramp (bare = seconds, default 1)\n"
	"  --spin                 busy-wait between sends instead of clock_nanosleep\n"
	"  --busy-poll            each pair is one thread that never sleeps (lowest latency, a core each)\n"
	"  --busy-poll-for TIME   poll for a reply up to TIME after the last send or reply before blocking\n"
	"  --idle-poll            keep every CPU out of its idle state with a lowest-priority spinner\n"
	"  --seed N               PRNG seed (default 1)\n"
	"  --timeout TIME         client request timeout (default 10s)\n"
	"  --no-delay 0|1         TCP_NODELAY (default 1)\n"
	"  -c, --cpus LIST        pin pair i's sender to the i-th cpu of LIST\n"
	"  -o, --output FILE      per-request records; --output-format csv (default) | json\n"
	"  --json                 print the summary as one JSON object\n"
	"  --trace FILE           OpenTelemetry JSON spans (client side; nodes take --trace too)\n"
	"operations, in order (values: N[k|m|g], times ns/us/ms/s, unif/exp/norm/lognorm/gamma,\n"
	"aseq/gseq, file:path=F,col=N; ',' or ':' separate):\n"
	"  -C TIME[,wall|loop]    COMPUTE (thread CPU time; wall clock; calibrated loop)\n"
	"  -L BYTES               LOAD;  --load-offset OFFSET\n"
	"  -S BYTES[,sync|nosync|psync]  STORE;  --store-offset OFFSET\n"
	"  -F T1[,T2..][,NACK][,nack=N][,timeout=T][,retry=N][,ps=B][,rs=B][,branch]\n"
	"                         FORWARD the following ops to the targets; --fwd-end closes it,\n"
	"                         --next-branch moves to the next target's own chain (branch)\n"
	"  --skip [N][,prob=P]    skip the next N ops with probability P\n"
	"  --ps BYTES, --rs BYTES request and reply message sizes of the current hop\n"
	"  --sample SPEC          draw -n values of SPEC with --seed, print their statistics, exit\n";

/* --sample: check a value spec (distribution, bounds, sequence) without a node. */
static int sample_values(struct client *cl)
{
	struct wl_value v;
	struct wl_rng rng;
	if (wl_value_parse(cl->sample_spec, WL_UNIT_COUNT, &v, "--sample") < 0)
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

enum {
	OPT_TO = 256, OPT_RESOLVE, OPT_BUSY, OPT_BUSY_FOR, OPT_IDLE, OPT_NT, OPT_NS, OPT_RSS, OPT_SPIN, OPT_SEED, OPT_TIMEOUT, OPT_NODELAY,
	OPT_OUTFMT, OPT_JSON, OPT_TRACE, OPT_SAMPLE, OPT_LOFF, OPT_SOFF, OPT_SKIP, OPT_FWDEND, OPT_BRANCH, OPT_PS, OPT_RS,
};

static int parse_count(const char *text, const char *what, double lo, double hi, uint64_t *out)
{
	double v;
	if (wl_parse_number(text, WL_UNIT_COUNT, &v, what) < 0)
		return -1;
	if (v < lo || v > hi || v != floor(v))
		return wl_err("%s: %s is not a whole number within %.0f..%.0f", what, text, lo, hi);
	*out = (uint64_t)v;
	return 0;
}

static int parse_args(int argc, char **argv, struct client *cl)
{
	static const struct option opts[] = {
		{"to", required_argument, 0, OPT_TO}, {"resolve", required_argument, 0, OPT_RESOLVE},
		{"nt", required_argument, 0, OPT_NT}, {"num-threads", required_argument, 0, OPT_NT},
		{"ns", required_argument, 0, OPT_NS}, {"num-sessions", required_argument, 0, OPT_NS},
		{"rss", required_argument, 0, OPT_RSS}, {"spin", no_argument, 0, OPT_SPIN},
		{"busy-poll", no_argument, 0, OPT_BUSY}, {"busy-poll-for", required_argument, 0, OPT_BUSY_FOR},
		{"idle-poll", no_argument, 0, OPT_IDLE},
		{"seed", required_argument, 0, OPT_SEED}, {"timeout", required_argument, 0, OPT_TIMEOUT},
		{"no-delay", required_argument, 0, OPT_NODELAY}, {"cpus", required_argument, 0, 'c'},
		{"output", required_argument, 0, 'o'}, {"output-format", required_argument, 0, OPT_OUTFMT},
		{"json", no_argument, 0, OPT_JSON}, {"trace", required_argument, 0, OPT_TRACE},
		{"load-offset", required_argument, 0, OPT_LOFF}, {"store-offset", required_argument, 0, OPT_SOFF},
		{"skip", required_argument, 0, OPT_SKIP}, {"fwd-end", no_argument, 0, OPT_FWDEND},
		{"next-branch", no_argument, 0, OPT_BRANCH}, {"ps", required_argument, 0, OPT_PS},
		{"rs", required_argument, 0, OPT_RS}, {"sample", required_argument, 0, OPT_SAMPLE},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	/* Operations are order-sensitive, so they are collected during this pass;
	 * --resolve must come first for names in -F, hence the pre-scan in main. */
	const char *to = "127.0.0.1:7891";
	uint64_t n;
	double v;
	int o, rc = 0;
	optind = 1;
	while (rc == 0 && (o = getopt_long(argc, argv, "n:r:p:C:L:S:F:c:o:h", opts, NULL)) != -1) {
		switch (o) {
		case OPT_TO: to = optarg; break;
		case OPT_RESOLVE: break; /* handled by the pre-scan */
		case OPT_NT: rc = parse_count(optarg, "--nt", 1, 1024, &n); cl->npairs = (int)n; break;
		case 'n': rc = parse_count(optarg, "-n", 1, 1e12, &cl->nreq); break;
		case OPT_NS: rc = parse_count(optarg, "--ns", 1, 1e12, &cl->nsessions); break;
		case 'r':
		case 'p':
			cl->pace_mode = o == 'r' ? WL_PACE_RATE : WL_PACE_PERIOD;
			rc = wl_value_parse(optarg, o == 'r' ? WL_UNIT_COUNT : WL_UNIT_TIME, &cl->pace_value, o == 'r' ? "-r" : "-p");
			if (rc == 0 && cl->pace_value.kind == WL_VAL_CONST && cl->pace_value.constant <= 0)
				rc = wl_err("%s: '%s' must be above 0", o == 'r' ? "-r" : "-p", optarg);
			break;
		case OPT_RSS: /* DistWalk gives the rate step in seconds */
			if (strspn(optarg, "0123456789.") == strlen(optarg))
				rc = wl_parse_number(optarg, WL_UNIT_COUNT, &v, "--rss"), v *= 1e6;
			else
				rc = wl_parse_number(optarg, WL_UNIT_TIME, &v, "--rss");
			if (rc == 0 && v < 1)
				rc = wl_err("--rss: '%s' is below 1us", optarg);
			cl->rss_ns = (uint64_t)(v * 1000);
			break;
		case OPT_SPIN: cl->spin = true; break;
		case OPT_BUSY: cl->busy_poll = true; break;
		case OPT_IDLE: cl->idle_poll = true; break;
		case OPT_BUSY_FOR:
			rc = wl_parse_number(optarg, WL_UNIT_TIME, &v, "--busy-poll-for");
			if (rc == 0 && (v < 0 || v > 1e6))
				rc = wl_err("--busy-poll-for: '%s' is not within 0..1s", optarg);
			cl->poll_window_ns = (uint64_t)(v * 1000);
			break;
		case OPT_SEED: rc = parse_count(optarg, "--seed", 0, 1.8e19, &cl->seed); break;
		case OPT_TIMEOUT:
			rc = wl_parse_number(optarg, WL_UNIT_TIME, &v, "--timeout");
			if (rc == 0 && v < 1)
				rc = wl_err("--timeout: '%s' is below 1us", optarg);
			cl->timeout_ns = (uint64_t)(v * 1000);
			break;
		case OPT_NODELAY: cl->nodelay = strcmp(optarg, "0") != 0; break;
		case 'c': rc = (cl->ncpus = wl_parse_cpulist(optarg, cl->cpus, 256)) < 0 ? -1 : 0; break;
		case 'o': cl->out_path = optarg; break;
		case OPT_OUTFMT:
			if (strcmp(optarg, "csv") && strcmp(optarg, "json"))
				rc = wl_err("--output-format: '%s' is not csv or json", optarg);
			cl->out_json = !strcmp(optarg, "json");
			break;
		case OPT_JSON: cl->json = true; break;
		case OPT_TRACE: cl->trace_path = optarg; break;
		case OPT_SAMPLE: cl->sample_spec = optarg; break;
		case 'C': rc = wl_workload_compute(&cl->wk, optarg); break;
		case 'L': rc = wl_workload_io(&cl->wk, WL_OP_LOAD, optarg); break;
		case 'S': rc = wl_workload_io(&cl->wk, WL_OP_STORE, optarg); break;
		case OPT_LOFF: rc = wl_workload_offset(&cl->wk, WL_OP_LOAD, optarg); break;
		case OPT_SOFF: rc = wl_workload_offset(&cl->wk, WL_OP_STORE, optarg); break;
		case 'F': rc = wl_workload_forward(&cl->wk, optarg); break;
		case OPT_FWDEND: rc = wl_workload_end_forward(&cl->wk); break;
		case OPT_BRANCH: rc = wl_workload_next_branch(&cl->wk); break;
		case OPT_SKIP: rc = wl_workload_skip(&cl->wk, optarg); break;
		case OPT_PS: rc = wl_workload_size(&cl->wk, false, optarg); break;
		case OPT_RS: rc = wl_workload_size(&cl->wk, true, optarg); break;
		case 'h': fputs(usage, stdout); exit(0);
		default: fputs(usage, stderr); return -1;
		}
	}
	if (rc < 0)
		return -1;
	if (optind < argc)
		return wl_err("unexpected argument '%s' (see --help)", argv[optind]);
	if (cl->nsessions > cl->nreq)
		return wl_err("--ns %llu is above -n %llu: a session needs at least one request",
			      (unsigned long long)cl->nsessions, (unsigned long long)cl->nreq);
	if (cl->nreq >= (1ull << 40))
		return wl_err("-n: at most 2^40 requests per pair");
	if (wl_addr_parse(to, &cl->to, "--to") < 0 || wl_workload_finish(&cl->wk) < 0)
		return -1;
	return 0;
}

/* --resolve must be known before any -F or --to is parsed, wherever it appears. */
static int prescan_resolve(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *m = NULL;
		if (!strcmp(argv[i], "--resolve") && i + 1 < argc)
			m = argv[++i];
		else if (!strncmp(argv[i], "--resolve=", 10))
			m = argv[i] + 10;
		if (m && wl_resolve_add(m) < 0)
			return -1;
	}
	return 0;
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

int main(int argc, char **argv)
{
	static struct client cl = {.npairs = 1, .nreq = 1, .nsessions = 1, .timeout_ns = 10000000000ull,
				   .seed = 1, .nodelay = true, .pace_mode = WL_PACE_CLOSED};
	wl_set_progname("wl-client");
	wl_workload_init(&cl.wk);
	if (prescan_resolve(argc, argv) < 0 || parse_args(argc, argv, &cl) < 0)
		return 2;
	if (cl.sample_spec)
		return sample_values(&cl);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0)
		return wl_err("pthread_sigmask failed"), 1;
	if (cl.trace_path && !(cl.trace = wl_trace_open(cl.trace_path, "wl-client")))
		return 1;
	struct pair *pairs = calloc((size_t)cl.npairs, sizeof(*pairs));
	if (!pairs)
		return wl_err("out of memory for %d pairs", cl.npairs), 1;
	for (int i = 0; i < cl.npairs; i++) {
		struct pair *p = &pairs[i];
		p->cl = &cl;
		p->index = i;
		p->recs = calloc(cl.nreq, sizeof(*p->recs));
		p->ids = cl.trace ? calloc(cl.nreq, sizeof(*p->ids)) : NULL;
		if (!p->recs || (cl.trace && !p->ids))
			return wl_err("out of memory for %llu records", (unsigned long long)cl.nreq), 1;
		for (uint64_t k = 0; k < cl.nreq; k++) {
			p->recs[k].status = WL_ST_UNSENT;
			p->recs[k].thread = (uint16_t)i;
		}
		wl_summary_init(&p->sum);
		wl_rng_seed(&p->rng, cl.seed * 0x100000001b3ull + (uint64_t)i);
		sem_init(&p->ready, 0, 0);
		sem_init(&p->done, 0, 0);
	}
	pthread_t sig_thread;
	if (pthread_create(&sig_thread, NULL, signal_main, &cl) != 0)
		return wl_err("pthread_create signal thread failed"), 1;
	if (cl.idle_poll && wl_idle_poll_start() < 0)
		return 1;
	/* The kernel's default 50 us of timer slack stays: senders wake up to
	 * that late (the summary's send lateness says how late), and requests
	 * due meanwhile go out in one send.  Measured with 1 ns of slack: send
	 * lateness p99 60 -> 15-30 us, but one wake-up per request, and p99
	 * latency in the milliseconds above 60k req/s instead of under 100 us
	 * up to 200k (bench/workload_bench.py, default mode). */
	cl.rt_offset_ns = wl_realtime_ns() - wl_now_ns();
	cl.start_ns = wl_now_ns() + 5000000; /* every pair starts its schedule at the same instant */
	bool solo = wl_pair_solo(&cl);
	for (int i = 0; i < cl.npairs; i++) {
		int rc = solo ? 0 : pthread_create(&pairs[i].receiver, NULL, wl_receiver_main, &pairs[i]);
		if (rc == 0)
			rc = pthread_create(&pairs[i].sender, NULL, solo ? wl_solo_main : wl_sender_main, &pairs[i]);
		if (rc != 0)
			return wl_err("pthread_create pair %d: %s", i, strerror(rc)), 1;
	}
	struct wl_summary total;
	wl_summary_init(&total);
	const struct wl_record **recs = calloc((size_t)cl.npairs, sizeof(*recs));
	uint64_t *counts = calloc((size_t)cl.npairs, sizeof(*counts));
	for (int i = 0; i < cl.npairs; i++) {
		pthread_join(pairs[i].sender, NULL);
		if (!solo)
			pthread_join(pairs[i].receiver, NULL);
		for (uint64_t k = 0; k < cl.nreq; k++) {
			const struct wl_record *r = &pairs[i].recs[k];
			if (r->status == WL_ST_UNSENT) {
				pairs[i].sum.unsent++;
				continue;
			}
			if (r->send_ns < pairs[i].sum.first_send_ns)
				pairs[i].sum.first_send_ns = r->send_ns;
			if (cl.pace_mode != WL_PACE_CLOSED)
				wl_hist_add(&pairs[i].sum.late, r->late_ns);
		}
		wl_summary_merge(&total, &pairs[i].sum);
		if (recs && counts) {
			recs[i] = pairs[i].recs;
			counts[i] = cl.nreq;
		}
	}
	__atomic_store_n(&cl.stop, 1, __ATOMIC_RELAXED);
	pthread_join(sig_thread, NULL);
	wl_summary_print(stdout, &total, cl.json);
	int rc = 0;
	if (cl.out_path && (!recs || !counts ||
			    wl_records_write(cl.out_path, cl.out_json, recs, counts, cl.npairs, cl.start_ns) < 0))
		rc = 1;
	wl_trace_close(cl.trace);
	for (int i = 0; i < cl.npairs; i++) {
		free(pairs[i].recs);
		free(pairs[i].ids);
	}
	free(pairs);
	free(recs);
	free(counts);
	return rc;
}
