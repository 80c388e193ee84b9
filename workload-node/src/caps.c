/* caps: what one request, one connection or all peers together may make a
 * node hold or do. Anyone who can reach a node can send it requests, so
 * every resource a request names is bounded by a flag with a default:
 * reply and request sizes, COMPUTE time, per-connection backlog, client and
 * outbound connections. A request over a cap is answered ERR (never run,
 * never clipped) and counted. The flags are one table: parsing, ranges and
 * the help text come from it. */
#include "caps.h"
#include "units.h"
#include "wire.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>

#define FD_RESERVE 64 /* stdio, storage, trace, acceptor, spare */

struct cap_opt {
	const char *name, *arg;
	enum wl_unit unit;
	size_t field; /* offset of a uint64_t in struct wl_node_cfg */
	double min, max, dflt; /* in the unit's base (us for times) */
	const char *dflt_text, *help;
};

#define FIELD(f) offsetof(struct wl_node_cfg, f)
static const struct cap_opt caps[] = {
	{"max-reply", "B", WL_UNIT_BYTES, FIELD(max_reply_bytes), WL_REPLY_MIN, WL_MAX_MSG, 16 << 20, "16m",
	 "largest reply a request may ask for"},
	{"max-request", "B", WL_UNIT_BYTES, FIELD(max_request_bytes), 1024, WL_MAX_MSG, 16 << 20, "16m",
	 "largest request read, or built for a FORWARD target"},
	{"max-compute", "TIME", WL_UNIT_TIME, FIELD(max_compute_ns), 1, 86400e6, 60e6, "60s",
	 "most COMPUTE time of one request (its ops together)"},
	{"max-backlog", "B", WL_UNIT_BYTES, FIELD(max_backlog_bytes), 64 << 10, 1 << 30, 1 << 20, "1m",
	 "memory a connection may hold before it is not read"},
	{"max-conns", "N", WL_UNIT_COUNT, FIELD(max_conns), 1, 1 << 20, 8192, "8192",
	 "client connections open at once; more are closed"},
	{"max-fwd-conns", "N", WL_UNIT_COUNT, FIELD(max_fwd_conns), 1, 65536, 256, "256",
	 "outbound connections per worker"},
	{"fwd-idle", "TIME", WL_UNIT_TIME, FIELD(fwd_idle_ns), 1e3, 86400e6, 60e6, "60s",
	 "close an outbound connection unused this long"},
};
#define NCAPS (sizeof(caps) / sizeof(caps[0]))

static bool given(const struct wl_node_cfg *cfg, size_t field_offset)
{
	for (size_t i = 0; i < NCAPS; i++)
		if (caps[i].field == field_offset)
			return cfg->caps_given & (1u << i);
	return false;
}

static uint64_t *field(struct wl_node_cfg *cfg, const struct cap_opt *c)
{
	return (uint64_t *)((char *)cfg + c->field);
}

static double in_field_unit(const struct cap_opt *c, double v)
{
	return c->unit == WL_UNIT_TIME ? v * 1000.0 : v; /* times are kept in ns */
}

void wl_caps_defaults(struct wl_node_cfg *cfg)
{
	for (size_t i = 0; i < NCAPS; i++)
		*field(cfg, &caps[i]) = (uint64_t)in_field_unit(&caps[i], caps[i].dflt);
}

/* A cap's option (its row's key is its index in caps[]); messages name it in full. */
static int opt_cap(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	const struct cap_opt *c = &caps[o->key];
	struct wl_node_cfg *cfg = ps->settings;
	char what[32];
	double v;
	snprintf(what, sizeof(what), "--%s", c->name);
	if (wl_parse_number(arg, c->unit, &v, what) < 0)
		return -1;
	if (v < c->min || v > c->max)
		return wl_err("%s: '%s' is out of range (%s from %.15g to %.15g%s)", what, arg, wl_unit_name(c->unit),
			      c->min, c->max, c->unit == WL_UNIT_TIME ? " us" : "");
	wl_opt_store(ps, o, in_field_unit(c, v), NULL);
	cfg->caps_given |= 1u << o->key;
	return 0;
}

size_t wl_caps_rows(struct wl_opt *rows, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < NCAPS && n + 1 < max; i++, n++)
		rows[n] = (struct wl_opt){0, caps[i].name, WL_ARG_REQUIRED, "VALUE", opt_cap, (int)i, NULL,
					  {WL_FIELD_U64, caps[i].field}};
	rows[n] = (struct wl_opt)WL_OPT_END;
	return n;
}

void wl_caps_usage(FILE *out)
{
	char opt[32];
	for (size_t i = 0; i < NCAPS; i++) {
		snprintf(opt, sizeof(opt), "%s %s", caps[i].name, caps[i].arg);
		fprintf(out, "      --%-18s %s (default %s)\n", opt, caps[i].help, caps[i].dflt_text);
	}
}

/* Every client and outbound connection is a descriptor: make sure the
 * process may open as many as the caps allow, so that a flood of clients
 * meets --max-conns (refused, counted) and never EMFILE in accept(). */
int wl_caps_fd_budget(struct wl_node_cfg *cfg)
{
	uint64_t per_worker = cfg->max_fwd_conns + 2 + (uint64_t)cfg->nbinds; /* outbound, poller, eventfd, sockets */
	uint64_t others = (uint64_t)cfg->nthreads * per_worker + FD_RESERVE;
	uint64_t need = cfg->max_conns + others;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return wl_err("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	if (rl.rlim_cur >= need)
		return 0;
	rlim_t target = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? (rlim_t)need : rl.rlim_max;
	if (target > rl.rlim_cur) {
		rl.rlim_cur = target;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return wl_err("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)target, strerror(errno));
	}
	if (target >= need)
		return 0;
	if (given(cfg, FIELD(max_conns)) || given(cfg, FIELD(max_fwd_conns)) || target <= others)
		return wl_err("--max-conns %llu and --max-fwd-conns %llu need %llu file descriptors, the hard limit is "
			      "%llu: lower them or raise the limit (ulimit -Hn)",
			      (unsigned long long)cfg->max_conns, (unsigned long long)cfg->max_fwd_conns,
			      (unsigned long long)need, (unsigned long long)target);
	cfg->max_conns = target - others;
	fprintf(stderr, "wl-node: --max-conns lowered to %llu: the file descriptor limit is %llu (ulimit -Hn)\n",
		(unsigned long long)cfg->max_conns, (unsigned long long)target);
	return 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

enum wl_cap wl_caps_check(const struct wl_node_cfg *cfg, const uint8_t *msg, size_t used)
{
	uint32_t reply_len;
	struct wl_cursor cur;
	struct wl_op op;
	const char *why;
	if (wl_request_chain(msg, used, &reply_len, &cur) < 0)
		return WL_CAP_NONE; /* validated on receipt: cannot happen */
	if (reply_len > cfg->max_reply_bytes)
		return WL_CAP_REPLY;
	uint64_t compute_ns = 0;
	/* Only this node's own chain: sub-chains are checked by their targets. */
	while (wl_chain_next(&cur, &op, &why) == 1) {
		if (op.kind == WL_OP_COMPUTE && (compute_ns = add_sat(compute_ns, op.compute.ns)) > cfg->max_compute_ns)
			return WL_CAP_COMPUTE;
		if (op.kind != WL_OP_FORWARD)
			continue;
		struct wl_target t;
		for (unsigned i = 0; i < op.fwd.ntargets; i++) {
			if (wl_fwd_target(&op, i, &t, &why) < 0)
				return WL_CAP_NONE;
			if ((uint64_t)WL_HDR_LEN + 4 + t.chain_len + t.pad_len > cfg->max_request_bytes)
				return WL_CAP_REQUEST;
		}
	}
	return WL_CAP_NONE;
}
