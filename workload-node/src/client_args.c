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

#define CTX(ps) ((struct client_args *)(ps)->ctx)
#define DEST(type, field) WL_DEST(WL_FIELD_##type, struct client, field)
#define NO_DEST WL_NO_DEST

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

enum count_key { K_NT, K_NS, K_SEED, K_RETRY };

static int opt_count(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	static const double range[][2] = {[K_NT] = {1, 1024}, [K_NS] = {1, 1e12}, [K_SEED] = {0, 1.8e19},
					  [K_RETRY] = {0, 1e6}};
	uint64_t n;
	if (parse_count(arg, ps->opt, range[o->key][0], range[o->key][1], &n) < 0)
		return -1;
	wl_opt_store(ps, o, (double)n, NULL); /* a whole number below 2^64: exact as a double */
	return 0;
}

static int opt_check(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	CTX(ps)->check = true;
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

enum time_key { T_RSS, T_RETRY_PERIOD, T_TIMEOUT };

/* A time (into ns) whose bare number is in unit_us (DistWalk: --rss in seconds, --retry-period in ms). */
static int opt_time(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	static const struct {
		double unit_us, min_us, max_us;
	} kinds[] = {[T_RSS] = {1e6, 1, 1e12}, [T_RETRY_PERIOD] = {1e3, 1, 3600e6}, [T_TIMEOUT] = {1, 1, 1e12}};
	double v, min_us = kinds[o->key].min_us, max_us = kinds[o->key].max_us;
	bool bare = arg[0] && strspn(arg, "0123456789.") == strlen(arg);
	if (wl_parse_number(arg, bare ? WL_UNIT_COUNT : WL_UNIT_TIME, &v, ps->opt) < 0)
		return -1;
	v *= bare ? kinds[o->key].unit_us : 1;
	if (v < min_us || v > max_us)
		return wl_err("%s: '%s' is not within %.0fus..%.0fs", ps->opt, arg, min_us, max_us / 1e6);
	wl_opt_store(ps, o, v * 1000, NULL);
	return 0;
}

static int opt_busy_for(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	double v;
	if (wl_parse_number(arg, WL_UNIT_TIME, &v, ps->opt) < 0)
		return -1;
	if (v < 0 || v > 1e6)
		return wl_err("%s: '%s' is not within 0..1s", ps->opt, arg);
	wl_opt_store(ps, o, v * 1000, NULL);
	return 0;
}

enum text_key { S_TO, S_BIND, S_RESOLVE, S_NAMES, S_SCRIPT, S_OUTPUT, S_OUTFMT, S_CPUS };

static int opt_text(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct client_args *a = CTX(ps);
	struct client *cl = a->cl;
	switch ((enum text_key)o->key) {
	case S_TO: a->to = arg; return 0;
	case S_BIND: a->bind = arg; return 0;
	case S_RESOLVE: return wl_resolve_add(arg);
	case S_NAMES: return wl_addr_known_names(arg);
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
	{0, "to", REQ, "ADDR", opt_text, S_TO, "first node: [tcp://|udp://]host[:port] (127.0.0.1:7891)", NO_DEST},
	{'b', "bind-addr", REQ, "ADDR", opt_text, S_BIND, "connect from this local host[:port] or :port", NO_DEST},
	{0, "resolve", REQ, "NAME=ADDR", opt_text, S_RESOLVE, "map a host name (--to, -F) to addr[:port]; repeatable",
	 NO_DEST},
	{'n', "num-pkts", REQ, "N|auto", opt_nreq, 0, "requests per pair (1); auto: one pass of the -r ramp or -p sequence",
	 NO_DEST},
	{0, "num-threads|nt", REQ, "N", opt_count, K_NT, "sender/receiver thread pairs (1)", DEST(INT, npairs)},
	{0, "num-sessions|ns", REQ, "N", opt_count, K_NS, "sessions per pair: reconnect between them (1)",
	 DEST(U64, nsessions)},
	{'r', "rate", REQ, "RATE", opt_pace, WL_PACE_RATE,
	 "requests/s per pair: number, distribution, aseq/gseq ramp, file", NO_DEST},
	{'p', "period", REQ, "TIME", opt_pace, WL_PACE_PERIOD,
	 "inter-request period per pair (bare = us); closed loop without -r/-p", NO_DEST},
	{0, "rate-step-secs|rss", REQ, "TIME", opt_time, T_RSS, "duration of one rate step (bare = seconds) (1)",
	 DEST(U64, rss_ns)},
	{0, "wait-spin|ws|spin", NONE, NULL, wl_opt_true, 0, "busy-wait until each send instead of sleeping",
	 DEST(BOOL, spin)},
	{0, "stag-send", NONE, NULL, wl_opt_true, 0, "stagger the pairs: pair i starts i/nt of a period late",
	 DEST(BOOL, stag_send)},
	{0, "busy-poll", NONE, NULL, wl_opt_true, 0, "each pair is one thread that never sleeps", DEST(BOOL, busy_poll)},
	{0, "busy-poll-for", REQ, "TIME", opt_busy_for, 0, "poll for a reply up to TIME after the last send or reply (0)",
	 DEST(U64, poll_window_ns)},
	{0, "idle-poll", NONE, NULL, wl_opt_true, 0, "keep every CPU out of its idle state (spinners)",
	 DEST(BOOL, idle_poll)},
	{0, "seed", REQ, "N", opt_count, K_SEED, "PRNG seed (1)", DEST(U64, seed)},
	{0, "timeout", REQ, "TIME", opt_time, T_TIMEOUT, "client request timeout (10s)", DEST(U64, timeout_ns)},
	{0, "no-delay|nd", REQ, "0|1", wl_opt_01, 0, "TCP_NODELAY (1)", DEST(BOOL, nodelay)},
	{0, "retry-num", REQ, "N", opt_count, K_RETRY, "connection attempts after a failed one (0)",
	 DEST(U32, retry_num)},
	{0, "retry-period", REQ, "TIME", opt_time, T_RETRY_PERIOD, "between connection attempts (bare = ms) (200ms)",
	 DEST(U64, retry_period_ns)},
	{0, "non-block", NONE, NULL, wl_opt_true, 0, "connect without blocking, spinning until connected",
	 DEST(BOOL, nonblock)},
	{0, "conn-times", NONE, NULL, wl_opt_true, 0, "print each session's connect() time", DEST(BOOL, conn_times)},
	{'c', "cpus", REQ, "LIST", opt_text, S_CPUS, "pin pair i's sender to the i-th cpu of LIST", NO_DEST},
	{'o', "output|output-file", REQ, "FILE[,sep=C][,header=B]", opt_text, S_OUTPUT,
	 "per-request records (a .txt file, sep= or header=: DistWalk's layout)", NO_DEST},
	{0, "output-format", REQ, "csv|json", opt_text, S_OUTFMT, "layout of -o FILE (csv)", NO_DEST},
	{0, "nano", NONE, NULL, wl_opt_true, 0, "records in DistWalk's layout, in nanoseconds", DEST(BOOL, dw_out.nano)},
	/* --pso, -i: records are kept in memory and written once, at the end */
	{0, "per-session-output|pso", NONE, NULL, wl_opt_ignore, 0, "accepted; records are written at the end", NO_DEST},
	{'i', "interactive-pso", NONE, NULL, wl_opt_ignore, 0, "accepted; records are written at the end", NO_DEST},
	{0, "json", NONE, NULL, wl_opt_true, 0, "print the summary as one JSON object", DEST(BOOL, json)},
	{0, "trace", REQ, "FILE", wl_opt_text, 0, "OpenTelemetry JSON spans (client side)", DEST(TEXT, trace_path)},
	{0, "sample", REQ, "SPEC", wl_opt_text, 0, "draw -n values of SPEC with --seed, print statistics",
	 DEST(TEXT, sample_spec)},
	{'f', "script-filename", REQ, "FILE", opt_text, S_SCRIPT, "read options from FILE as though written here",
	 NO_DEST},
	{0, "check", NONE, NULL, opt_check, 0, "parse only: print the chain as JSON, run nothing", NO_DEST},
	{0, "names", REQ, "N1,N2,..", opt_text, S_NAMES, "the host names a target may have (else an error)", NO_DEST},
	{'h', "help", NONE, NULL, wl_opt_help, 0, "this help", NO_DEST},
	{0, "usage", NONE, NULL, wl_opt_usage, 0, "a short usage message", NO_DEST},
	{0, "ssl-cert|ssl-key|ssl-ca|ssl-ciphers|ssl-ca-path", REQ, "X", opt_unsupported, 0, NULL, NO_DEST},
	{0, "ssl-verify", NONE, NULL, opt_unsupported, 0, NULL, NO_DEST},
	{0, "dpdk-tx-cpu|dpdk-rx-cpu", REQ, "N", opt_unsupported, 1, NULL, NO_DEST},
	WL_OPT_END,
};

/* The operations: chain_args.c builds the chain from them, in order. */
static const struct wl_opt operations[] = {
	WL_OPT_HEADING("operations, in order (values: N[k|m|g], times ns/us/ms/s, unif/exp/norm/lognorm/gamma,\n"
		       "aseq/gseq, file:PATH; ',' or ':' separate):"),
	{'C', "comp-time", REQ, "TIME[,wall|loop]", opt_chain, C_COMPUTE,
	 "COMPUTE (thread CPU time; wall clock; calibrated loop)", NO_DEST},
	{'L', "load-data", REQ, "BYTES", opt_chain, C_LOAD, "LOAD; or size=[BYTES],offset=[BYTES]", NO_DEST},
	{'S', "store-data", REQ, "[nosync|sync|psync,]BYTES", opt_chain, C_STORE,
	 "STORE (sync); or size=[BYTES],offset=[BYTES]", NO_DEST},
	{0, "load-offset", REQ, "BYTES", opt_chain, C_LOFF, "offset of the LOADs that follow (0)", NO_DEST},
	{0, "store-offset", REQ, "BYTES", opt_chain, C_SOFF, "offset of the STOREs that follow (0)", NO_DEST},
	{'F', "forward", REQ, "T1[,T2..][,nack=N][,timeout=T][,retry=R][,branch]", opt_chain, C_FWD,
	 "FORWARD the ops that follow to the targets", NO_DEST},
	{'R', "rs|reply", OPT, "[sendfile,]BYTES", opt_chain, C_REPLY,
	 "close the open -F (its reply size); at the top: the reply size", NO_DEST},
	{0, "fwd-end", NONE, NULL, opt_chain, C_FWDEND, "close the open -F", NO_DEST},
	{0, "next-branch", NONE, NULL, opt_chain, C_BRANCH, "with branch: the next target's own ops", NO_DEST},
	{'s', "skip", REQ, "N[,prob=P][,every=M]", opt_chain, C_SKIP, "skip the next N ops (1) with probability P",
	 NO_DEST},
	{0, "ps", REQ, "BYTES", opt_chain, C_PS, "size of the client's requests", NO_DEST},
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
	struct wl_parser ps = {.prog = "wl-client",
			       .synopsis = "[options] [operations]",
			       .tables = tables,
			       .settings = cl,
			       .ctx = &a};
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
