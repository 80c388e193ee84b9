/* client_args: wl-client's options, one table for parsing, --help and
 * --usage. Today's DistWalk options are read with DistWalk's meaning, the
 * paper's forms and our own too (README "wl-client"). Addresses are
 * resolved after the last option, so --resolve, --names and --check may
 * stand anywhere. */
#include "client_args.h"
#include "chain_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct client_args {
	struct client *cl;
	struct wl_chain_args chain;
	const char *to, *bind; /* parsed after the last option */
	bool check, nreq_auto;
};

enum count_key { K_NT, K_NS, K_SEED, K_RETRY };
enum flag_key { F_SPIN, F_BUSY, F_IDLE, F_JSON, F_NONBLOCK, F_CONN_TIMES, F_STAG, F_NANO, F_NOOP, F_CHECK };

#define CTX(ps) ((struct client_args *)(ps)->ctx)

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

static int opt_count(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	static const double range[][2] = {[K_NT] = {1, 1024}, [K_NS] = {1, 1e12}, [K_SEED] = {0, 1.8e19},
					  [K_RETRY] = {0, 1e6}};
	struct client *cl = CTX(ps)->cl;
	uint64_t n;
	if (parse_count(arg, ps->opt, range[o->key][0], range[o->key][1], &n) < 0)
		return -1;
	switch ((enum count_key)o->key) {
	case K_NT: cl->npairs = (int)n; break;
	case K_NS: cl->nsessions = n; break;
	case K_SEED: cl->seed = n; break;
	case K_RETRY: cl->retry_num = (uint32_t)n; break;
	}
	return 0;
}

static int opt_flag(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct client *cl = CTX(ps)->cl;
	switch ((enum flag_key)o->key) {
	case F_SPIN: cl->spin = true; break;
	case F_BUSY: cl->busy_poll = true; break;
	case F_IDLE: cl->idle_poll = true; break;
	case F_JSON: cl->json = true; break;
	case F_NONBLOCK: cl->nonblock = true; break;
	case F_CONN_TIMES: cl->conn_times = true; break;
	case F_STAG: cl->stag_send = true; break;
	case F_NANO: cl->dw_out.nano = true; break;
	case F_CHECK: CTX(ps)->check = true; break;
	case F_NOOP: break; /* --pso, -i: records are kept in memory and written once, at the end */
	}
	return 0;
}

/* -n N, or "auto": as many requests as a -r ramp or a -p sequence has (wl_client_args). */
static int opt_nreq(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	CTX(ps)->nreq_auto = !strcmp(arg, "auto");
	return CTX(ps)->nreq_auto ? 0 : parse_count(arg, ps->opt, 1, 1e12, &CTX(ps)->cl->nreq);
}

static int opt_pace(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct client *cl = CTX(ps)->cl;
	cl->pace_mode = (enum wl_pace_mode)o->key;
	if (wl_value_parse(arg, o->key == WL_PACE_RATE ? WL_UNIT_COUNT : WL_UNIT_TIME, &cl->pace_value, ps->opt) < 0)
		return -1;
	if (cl->pace_value.kind == WL_VAL_CONST && cl->pace_value.constant <= 0)
		return wl_err("%s: '%s' must be above 0", ps->opt, arg);
	return 0;
}

/* A time whose bare number is in unit_us (DistWalk: --rss in seconds, --retry-period in ms). */
static int time_bare_in(const char *arg, double unit_us, double min_us, double max_us, uint64_t *ns, const char *what)
{
	double v;
	bool bare = arg[0] && strspn(arg, "0123456789.") == strlen(arg);
	if (wl_parse_number(arg, bare ? WL_UNIT_COUNT : WL_UNIT_TIME, &v, what) < 0)
		return -1;
	v *= bare ? unit_us : 1;
	if (v < min_us || v > max_us)
		return wl_err("%s: '%s' is not within %.0fus..%.0fs", what, arg, min_us, max_us / 1e6);
	*ns = (uint64_t)(v * 1000);
	return 0;
}

enum time_key { T_RSS, T_RETRY_PERIOD, T_TIMEOUT, T_BUSY_FOR };

static int opt_time(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct client *cl = CTX(ps)->cl;
	switch ((enum time_key)o->key) {
	case T_RSS: return time_bare_in(arg, 1e6, 1, 1e12, &cl->rss_ns, ps->opt);
	case T_RETRY_PERIOD: return time_bare_in(arg, 1e3, 1, 3600e6, &cl->retry_period_ns, ps->opt);
	case T_TIMEOUT: return time_bare_in(arg, 1, 1, 1e12, &cl->timeout_ns, ps->opt);
	case T_BUSY_FOR: break;
	}
	double v;
	if (wl_parse_number(arg, WL_UNIT_TIME, &v, ps->opt) < 0)
		return -1;
	if (v < 0 || v > 1e6)
		return wl_err("%s: '%s' is not within 0..1s", ps->opt, arg);
	cl->poll_window_ns = (uint64_t)(v * 1000);
	return 0;
}

static int opt_nodelay(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	if (strcmp(arg, "0") && strcmp(arg, "1"))
		return wl_err("%s: expected 0 or 1, not '%s'", ps->opt, arg);
	CTX(ps)->cl->nodelay = arg[0] == '1';
	return 0;
}

enum text_key { S_TO, S_BIND, S_RESOLVE, S_NAMES, S_TRACE, S_SAMPLE, S_SCRIPT, S_OUTPUT, S_OUTFMT, S_CPUS };

static int opt_text(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct client_args *a = CTX(ps);
	struct client *cl = a->cl;
	switch ((enum text_key)o->key) {
	case S_TO: a->to = arg; return 0;
	case S_BIND: a->bind = arg; return 0;
	case S_RESOLVE: return wl_resolve_add(arg);
	case S_NAMES: return wl_addr_known_names(arg);
	case S_TRACE: cl->trace_path = arg; return 0;
	case S_SAMPLE: cl->sample_spec = arg; return 0;
	case S_SCRIPT: return wl_parser_include(ps, arg);
	case S_OUTPUT: return wl_dw_output_parse(arg, &cl->out_path, &cl->dw_out, ps->opt);
	case S_CPUS: return (cl->ncpus = wl_parse_cpulist(arg, cl->cpus, 256)) < 0 ? -1 : 0;
	case S_OUTFMT:
		if (strcmp(arg, "csv") && strcmp(arg, "json"))
			return wl_err("%s: '%s' is not csv or json", ps->opt, arg);
		cl->out_json = !strcmp(arg, "json");
		return 0;
	}
	return 0;
}

static int opt_unsupported(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	return wl_err("%s: %s is not supported: wl-client speaks plain TCP and UDP", ps->opt,
		      o->key ? "DPDK" : "TLS");
}

enum chain_key { C_COMPUTE, C_LOAD, C_STORE, C_LOFF, C_SOFF, C_FWD, C_REPLY, C_FWDEND, C_BRANCH, C_SKIP, C_PS };

static int opt_chain(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct wl_chain_args *ca = &CTX(ps)->chain;
	const char *w = ps->opt;
	switch ((enum chain_key)o->key) {
	case C_COMPUTE: return wl_chain_compute(ca, arg, w);
	case C_LOAD: return wl_chain_io(ca, WL_OP_LOAD, arg, w);
	case C_STORE: return wl_chain_io(ca, WL_OP_STORE, arg, w);
	case C_LOFF: return wl_chain_offset(ca, WL_OP_LOAD, arg, w);
	case C_SOFF: return wl_chain_offset(ca, WL_OP_STORE, arg, w);
	case C_FWD: return wl_chain_forward(ca, arg, w);
	case C_REPLY: return wl_chain_reply(ca, arg, w);
	case C_FWDEND: return wl_chain_end_forward(ca, w);
	case C_BRANCH: return wl_chain_next_branch(ca, w);
	case C_SKIP: return wl_chain_skip(ca, arg, w);
	case C_PS: return wl_chain_request_size(ca, arg, w);
	}
	return 0;
}

#define NONE WL_ARG_NONE
#define REQ WL_ARG_REQUIRED
#define OPT WL_ARG_OPTIONAL

static const struct wl_opt general[] = {
	{0, "to", REQ, "ADDR", opt_text, S_TO, "first node: [tcp://|udp://]host[:port] (127.0.0.1:7891)"},
	{'b', "bind-addr", REQ, "ADDR", opt_text, S_BIND, "connect from this local host[:port] or :port"},
	{0, "resolve", REQ, "NAME=ADDR", opt_text, S_RESOLVE, "map a host name (--to, -F) to addr[:port]; repeatable"},
	{'n', "num-pkts", REQ, "N|auto", opt_nreq, 0,
	 "requests per pair (1); auto: one pass of the -r ramp or -p sequence"},
	{0, "num-threads|nt", REQ, "N", opt_count, K_NT, "sender/receiver thread pairs (1)"},
	{0, "num-sessions|ns", REQ, "N", opt_count, K_NS, "sessions per pair: reconnect between them (1)"},
	{'r', "rate", REQ, "RATE", opt_pace, WL_PACE_RATE,
	 "requests/s per pair: number, distribution, aseq/gseq ramp, file"},
	{'p', "period", REQ, "TIME", opt_pace, WL_PACE_PERIOD,
	 "inter-request period per pair (bare = us); closed loop without -r/-p"},
	{0, "rate-step-secs|rss", REQ, "TIME", opt_time, T_RSS, "duration of one rate step (bare = seconds) (1)"},
	{0, "wait-spin|ws|spin", NONE, NULL, opt_flag, F_SPIN, "busy-wait until each send instead of sleeping"},
	{0, "stag-send", NONE, NULL, opt_flag, F_STAG, "stagger the pairs: pair i starts i/nt of a period late"},
	{0, "busy-poll", NONE, NULL, opt_flag, F_BUSY, "each pair is one thread that never sleeps"},
	{0, "busy-poll-for", REQ, "TIME", opt_time, T_BUSY_FOR,
	 "poll for a reply up to TIME after the last send or reply (0)"},
	{0, "idle-poll", NONE, NULL, opt_flag, F_IDLE, "keep every CPU out of its idle state (spinners)"},
	{0, "seed", REQ, "N", opt_count, K_SEED, "PRNG seed (1)"},
	{0, "timeout", REQ, "TIME", opt_time, T_TIMEOUT, "client request timeout (10s)"},
	{0, "no-delay|nd", REQ, "0|1", opt_nodelay, 0, "TCP_NODELAY (1)"},
	{0, "retry-num", REQ, "N", opt_count, K_RETRY, "connection attempts after a failed one (0)"},
	{0, "retry-period", REQ, "TIME", opt_time, T_RETRY_PERIOD, "between connection attempts (bare = ms) (200ms)"},
	{0, "non-block", NONE, NULL, opt_flag, F_NONBLOCK, "connect without blocking, spinning until connected"},
	{0, "conn-times", NONE, NULL, opt_flag, F_CONN_TIMES, "print each session's connect() time"},
	{'c', "cpus", REQ, "LIST", opt_text, S_CPUS, "pin pair i's sender to the i-th cpu of LIST"},
	{'o', "output|output-file", REQ, "FILE[,sep=C][,header=B]", opt_text, S_OUTPUT,
	 "per-request records (a .txt file, sep= or header=: DistWalk's layout)"},
	{0, "output-format", REQ, "csv|json", opt_text, S_OUTFMT, "layout of -o FILE (csv)"},
	{0, "nano", NONE, NULL, opt_flag, F_NANO, "records in DistWalk's layout, in nanoseconds"},
	{0, "per-session-output|pso", NONE, NULL, opt_flag, F_NOOP, "accepted; records are written at the end"},
	{'i', "interactive-pso", NONE, NULL, opt_flag, F_NOOP, "accepted; records are written at the end"},
	{0, "json", NONE, NULL, opt_flag, F_JSON, "print the summary as one JSON object"},
	{0, "trace", REQ, "FILE", opt_text, S_TRACE, "OpenTelemetry JSON spans (client side)"},
	{0, "sample", REQ, "SPEC", opt_text, S_SAMPLE, "draw -n values of SPEC with --seed, print statistics"},
	{'f', "script-filename", REQ, "FILE", opt_text, S_SCRIPT, "read options from FILE as though written here"},
	{0, "check", NONE, NULL, opt_flag, F_CHECK, "parse only: print the chain as JSON, run nothing"},
	{0, "names", REQ, "N1,N2,..", opt_text, S_NAMES, "the host names a target may have (else an error)"},
	{'h', "help", NONE, NULL, wl_opt_help, 0, "this help"},
	{0, "usage", NONE, NULL, wl_opt_usage, 0, "a short usage message"},
	{0, "ssl-cert|ssl-key|ssl-ca|ssl-ciphers|ssl-ca-path", REQ, "X", opt_unsupported, 0, NULL},
	{0, "ssl-verify", NONE, NULL, opt_unsupported, 0, NULL},
	{0, "dpdk-tx-cpu|dpdk-rx-cpu", REQ, "N", opt_unsupported, 1, NULL},
	WL_OPT_END,
};

static const struct wl_opt operations[] = {
	WL_OPT_HEADING("operations, in order (values: N[k|m|g], times ns/us/ms/s, unif/exp/norm/lognorm/gamma,\n"
		       "aseq/gseq, file:PATH; ',' or ':' separate):"),
	{'C', "comp-time", REQ, "TIME[,wall|loop]", opt_chain, C_COMPUTE,
	 "COMPUTE (thread CPU time; wall clock; calibrated loop)"},
	{'L', "load-data", REQ, "BYTES", opt_chain, C_LOAD, "LOAD; or size=[BYTES],offset=[BYTES]"},
	{'S', "store-data", REQ, "[nosync|sync|psync,]BYTES", opt_chain, C_STORE,
	 "STORE (sync); or size=[BYTES],offset=[BYTES]"},
	{0, "load-offset", REQ, "BYTES", opt_chain, C_LOFF, "offset of the LOADs that follow (0)"},
	{0, "store-offset", REQ, "BYTES", opt_chain, C_SOFF, "offset of the STOREs that follow (0)"},
	{'F', "forward", REQ, "T1[,T2..][,nack=N][,timeout=T][,retry=R][,branch]", opt_chain, C_FWD,
	 "FORWARD the ops that follow to the targets"},
	{'R', "rs|reply", OPT, "[sendfile,]BYTES", opt_chain, C_REPLY,
	 "close the open -F (its reply size); at the top: the reply size"},
	{0, "fwd-end", NONE, NULL, opt_chain, C_FWDEND, "close the open -F"},
	{0, "next-branch", NONE, NULL, opt_chain, C_BRANCH, "with branch: the next target's own ops"},
	{'s', "skip", REQ, "N[,prob=P][,every=M]", opt_chain, C_SKIP, "skip the next N ops (1) with probability P"},
	{0, "ps", REQ, "BYTES", opt_chain, C_PS, "size of the client's requests"},
	WL_OPT_END,
};

/* -n auto: the requests of one pass through the ramp (rate) or the sequence (period). */
static int auto_count(struct client *cl, uint64_t *out)
{
	struct wl_value *v = &cl->pace_value;
	uint64_t terms = cl->pace_mode == WL_PACE_CLOSED ? 0 : wl_value_terms(v);
	if (terms == 0)
		return wl_err("-n auto: needs -r or -p with a sequence (aseq/gseq) or a file, whose length says how many");
	if (cl->pace_mode == WL_PACE_PERIOD) {
		*out = terms;
		return 0;
	}
	double step_ns = cl->rss_ns ? (double)cl->rss_ns : 1e9;
	uint64_t n = 0;
	for (uint64_t k = 0; k < terms; k++) /* as pacing.c schedules: i / rate < step */
		n += wl_pace_step_count(wl_value_term(v, k, NULL), (uint64_t)step_ns);
	if (n == 0)
		return wl_err("-n auto: the ramp sends no request");
	*out = n;
	return 0;
}

static int finish(struct client_args *a)
{
	struct client *cl = a->cl;
	if (a->nreq_auto && auto_count(cl, &cl->nreq) < 0)
		return -1;
	if (cl->nsessions > cl->nreq)
		return wl_err("--ns %llu is above -n %llu: a session needs at least one request",
			      (unsigned long long)cl->nsessions, (unsigned long long)cl->nreq);
	if (cl->nreq >= (1ull << 40))
		return wl_err("-n: at most 2^40 requests per pair");
	if (cl->out_path && wl_dw_output_finish(cl->out_path, &cl->dw_out) < 0)
		return -1;
	if (!cl->out_path && cl->dw_out.nano)
		return wl_err("--nano: applies to -o records");
	if (cl->dw_out.on && cl->out_json)
		return wl_err("--output-format json: DistWalk's record layouts (sep=, header=, .txt, --nano) are text");
	wl_addr_offline(a->check); /* --check: no name goes to DNS */
	if (a->bind && wl_addr_parse_local(a->bind, &cl->bind_addr, "-b", 0) < 0)
		return -1;
	cl->has_bind = a->bind != NULL;
	return wl_addr_parse(a->to ? a->to : "127.0.0.1:7891", &cl->to, "--to") < 0 ? -1 : wl_chain_finish(&a->chain);
}

enum wl_args_result wl_client_args(struct client *cl, int argc, char **argv)
{
	static const struct wl_opt *const tables[] = {general, operations, NULL};
	struct client_args a = {.cl = cl};
	wl_chain_args_init(&a.chain, &cl->wk);
	struct wl_parser ps = {.prog = "wl-client", .synopsis = "[options] [operations]", .tables = tables, .ctx = &a};
	wl_set_plain_errors(true);
	int rc = wl_parse(&ps, argc, argv);
	if (rc == 0 && !ps.stop)
		rc = finish(&a);
	wl_set_plain_errors(false);
	free(a.chain.fwds); /* parsing state; the chain itself stays in cl->wk */
	if (rc < 0)
		return WL_ARGS_BAD;
	if (ps.stop)
		return WL_ARGS_EXIT;
	if (a.check) {
		wl_client_check_json(stdout, cl);
		return WL_ARGS_EXIT;
	}
	return WL_ARGS_RUN;
}
