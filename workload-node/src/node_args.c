/* node_args: wl-node's options, one table for parsing, --help and --usage
 * (the caps' rows come from caps.c). Today's DistWalk options are read with
 * DistWalk's meaning, our own forms too (README "wl-node"). */
#include "node_args.h"
#include "caps.h"
#include "units.h"
#include "wire.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

struct node_args {
	struct wl_node_cfg *cfg;
	bool check;
};

#define CFG(ps) ((struct wl_node_cfg *)(ps)->settings)
#define DEST(type, field) WL_DEST(WL_FIELD_##type, struct wl_node_cfg, field)
#define NO_DEST WL_NO_DEST

static int parse_mode(const char *arg, const char *const *names, int n, const char *what)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(arg, names[i]))
			return i;
	return wl_err("%s: '%s' is not one of %s, %s, %s", what, arg, names[0], names[1], names[2]);
}

enum mode_key { M_ACCEPT, M_POLL };

static int opt_mode(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	static const char *const names[][3] = {[M_ACCEPT] = {"child", "shared", "parent"},
					       [M_POLL] = {"epoll", "poll", "select"}};
	struct wl_node_cfg *cfg = CFG(ps);
	int mode = parse_mode(arg, names[o->key], 3, ps->opt);
	if (mode >= 0 && o->key == M_ACCEPT)
		cfg->accept_mode = (enum wl_accept_mode)mode;
	else if (mode >= 0)
		cfg->poll_mode = (enum wl_poll_mode)mode;
	return mode < 0 ? -1 : 0;
}

/* --sync: DistWalk's bare number is milliseconds. */
static int sync_period(const char *arg, struct wl_node_cfg *cfg, const char *what)
{
	double v;
	bool bare = arg[0] && strspn(arg, "0123456789.") == strlen(arg);
	if (wl_parse_number(arg, WL_UNIT_TIME, &v, what) < 0)
		return -1;
	v *= bare ? 1e3 : 1;
	if (v <= 0)
		return wl_err("%s: the period must be above 0", what);
	cfg->psync_period_ns = (uint64_t)(v * 1000.0);
	cfg->sync_given = true;
	return 0;
}

static int opt_sync(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	return sync_period(arg, CFG(ps), ps->opt);
}

enum num_key { N_THREADS, N_BACKLOG, N_MAXSTORE, N_BUSY_FOR, N_LOOPS };

static int opt_number(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	static const struct {
		enum wl_unit unit;
		double lo, hi, scale; /* scale: into the field's unit (us to ns) */
		const char *range;
	} kinds[] = {[N_THREADS] = {WL_UNIT_COUNT, 1, 1024, 1, "1..1024"},
		     [N_BACKLOG] = {WL_UNIT_COUNT, 1, 1 << 20, 1, "1..1048576"},
		     [N_MAXSTORE] = {WL_UNIT_BYTES, 4096, 1e18, 1, "4k or more"},
		     [N_BUSY_FOR] = {WL_UNIT_TIME, 0, 1e6, 1000, "0..1s"},
		     [N_LOOPS] = {WL_UNIT_RATIO, -1, 1e9, 1, "-1 (off), 0 (calibrated) or iterations per us"}};
	double v;
	if (wl_parse_number(arg, kinds[o->key].unit, &v, ps->opt) < 0)
		return -1;
	if (v < kinds[o->key].lo || v > kinds[o->key].hi)
		return wl_err("%s: '%s' is not within %s", ps->opt, arg, kinds[o->key].range);
	wl_opt_store(ps, o, v * kinds[o->key].scale, NULL);
	return 0;
}

static int opt_check(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	((struct node_args *)ps->ctx)->check = true;
	return 0;
}

static int opt_bind(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct wl_node_cfg *cfg = CFG(ps);
	if (cfg->nbinds == WL_MAX_BINDS)
		return wl_err("%s: at most %d addresses", ps->opt, WL_MAX_BINDS);
	/* the address is parsed once --check is known: in wl_node_args */
	snprintf(cfg->binds[cfg->nbinds++].text, sizeof(cfg->binds[0].text), "%s", arg);
	return strlen(arg) < sizeof(cfg->binds[0].text) ? 0 : wl_err("%s: '%s' is too long", ps->opt, arg);
}

static int opt_cpus(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	struct wl_node_cfg *cfg = CFG(ps);
	cfg->cpus_auto = !strcmp(arg, "auto");
	return cfg->cpus_auto || (cfg->ncpus = wl_parse_cpulist(arg, cfg->cpus, WL_MAX_CPUS)) >= 0 ? 0 : -1;
}

static int opt_sched(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	return wl_sched_parse(arg, &CFG(ps)->sched);
}

static int opt_names(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	return wl_addr_known_names(arg);
}

/* -s PATH, or DistWalk's [file=PATH][,size=B][,sync=MS][,odirect][,wait-spin][,count=1]. */
static int storage_part(struct wl_parser *ps, const char *tok)
{
	struct wl_node_cfg *cfg = CFG(ps);
	static const struct wl_opt size_row = {0, "size", WL_ARG_REQUIRED, "B", opt_number, N_MAXSTORE, NULL,
					       DEST(U64, storage_max_bytes)};
	if (!strncmp(tok, "file=", 5))
		return (cfg->storage_path = wl_keep(tok + 5, strlen(tok + 5))) ? 0 : -1;
	if (!strncmp(tok, "size=", 5))
		return opt_number(ps, &size_row, tok + 5);
	if (!strncmp(tok, "sync=", 5))
		return sync_period(tok + 5, cfg, ps->opt);
	if (!strncmp(tok, "count=", 6))
		return strcmp(tok + 6, "1") ? wl_err("%s: %s: wl-node has one storage device (count=1)", ps->opt, tok) : 0;
	if (!strcmp(tok, "odirect") || !strcmp(tok, "wait-spin")) {
		*(tok[0] == 'o' ? &cfg->odirect : &cfg->storage_spin) = true;
		return 0;
	}
	return (cfg->storage_path = wl_keep(tok, strlen(tok))) ? 0 : -1;
}

static int opt_storage(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	char copy[4096], *save, *tok;
	if (strlen(arg) >= sizeof(copy))
		return wl_err("%s: '%s' is too long", ps->opt, arg);
	if (!strchr(arg, ',') && strncmp(arg, "file=", 5)) { /* a plain path */
		CFG(ps)->storage_path = arg;
		return 0;
	}
	strcpy(copy, arg);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (storage_part(ps, tok) < 0)
			return -1;
	return 0;
}

static int opt_help(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	wl_parser_help(ps, stdout);
	printf("caps (a request over one is answered ERR and counted):\n");
	wl_caps_usage(stdout);
	ps->stop = true;
	return 0;
}

static int opt_unsupported(struct wl_parser *ps, const struct wl_opt *o, const char *arg)
{
	return wl_err("%s: TLS is not supported: wl-node speaks plain TCP and UDP", ps->opt);
}

#define NONE WL_ARG_NONE
#define REQ WL_ARG_REQUIRED

static const struct wl_opt options[] = {
	{'b', "bind-addr", REQ, "ADDR", opt_bind, 0,
	 "[tcp://|udp://]host:port, repeatable; port 0: any (tcp://0.0.0.0:7891)", NO_DEST},
	{0, "num-threads|nt", REQ, "N", opt_number, N_THREADS, "worker threads (1)", DEST(INT, nthreads)},
	{'c', "cpus|thread-affinity", REQ, "LIST|auto", opt_cpus, 0,
	 "pin worker i to the i-th cpu of LIST (2-18, 0-8:2); auto: the cpus it may use", NO_DEST},
	{0, "sched|sched-policy", REQ, "POLICY", opt_sched, 0,
	 "other[:NICE] | rr:PRIO | fifo:PRIO | dl:RUNTIME,DEADLINE | deadline:R,D,P", NO_DEST},
	{'a', "am|accept-mode", REQ, "MODE", opt_mode, M_ACCEPT, "accept mode: child (default) | shared | parent",
	 NO_DEST},
	{'p', "pm|poll-mode", REQ, "MODE", opt_mode, M_POLL, "poll mode: epoll (default) | poll | select", NO_DEST},
	{0, "backlog|backlog-length|bl", REQ, "N", opt_number, N_BACKLOG, "listen backlog (1024)", DEST(INT, backlog)},
	{0, "no-delay|nd", REQ, "0|1", wl_opt_01, 0, "TCP_NODELAY on accepted and forward sockets (1)",
	 DEST(BOOL, nodelay)},
	{'s', "storage", REQ, "PATH", opt_storage, 0,
	 "storage file, never a symlink (a private file removed at exit);\n"
	 "or [file=PATH][,size=B][,sync=MS][,odirect][,wait-spin]",
	 NO_DEST},
	{'m', "max-storage-size", REQ, "B", opt_number, N_MAXSTORE, "offsets wrap at this size (1g)",
	 DEST(U64, storage_max_bytes)},
	{0, "odirect", NONE, NULL, wl_opt_true, 0, "open the storage file with O_DIRECT", DEST(BOOL, odirect)},
	{0, "sync", REQ, "PERIOD", opt_sync, 0,
	 "periodic fsync (bare = ms) for psync stores (100ms);\n"
	 "given, sync stores wait for it too, as in DistWalk",
	 NO_DEST},
	{0, "trace", REQ, "FILE", wl_opt_text, 0, "write OpenTelemetry JSON spans of every request",
	 DEST(TEXT, trace_path)},
	{0, "busy-poll|wait-spin|ws", NONE, NULL, wl_opt_true, 0, "workers poll without sleeping (a core each)",
	 DEST(BOOL, busy_poll)},
	{0, "busy-poll-for", REQ, "TIME", opt_number, N_BUSY_FOR, "poll up to TIME after the last event (0)",
	 DEST(U64, poll_window_ns)},
	{0, "wait-spin-storage|wss", NONE, NULL, wl_opt_true, 0, "the storage thread polls instead of sleeping",
	 DEST(BOOL, storage_spin)},
	{0, "idle-poll", NONE, NULL, wl_opt_true, 0, "keep every CPU out of its idle state (spinners)",
	 DEST(BOOL, idle_poll)},
	{0, "loops-per-usec", REQ, "N", opt_number, N_LOOPS,
	 "every COMPUTE a loop of N iterations per us; 0: calibrated (-1: off)", DEST(DOUBLE, loops_per_us)},
	/* --no-defrag: a connection keeps only its partial message, nothing to defragment */
	{0, "no-defrag", NONE, NULL, wl_opt_ignore, 0, "accepted; nothing to defragment", NO_DEST},
	{0, "check", NONE, NULL, opt_check, 0, "parse only: print the listen addresses as JSON", NO_DEST},
	{0, "names", REQ, "N1,N2,..", opt_names, 0, "accepted with --check (no chain here)", NO_DEST},
	{'h', "help", NONE, NULL, opt_help, 0, "this help", NO_DEST},
	{0, "usage", NONE, NULL, wl_opt_usage, 0, "a short usage message", NO_DEST},
	{0, "ssl-cert|ssl-key|ssl-ca|ssl-ciphers|ssl-ca-path", REQ, "X", opt_unsupported, 0, NULL, NO_DEST},
	{0, "ssl-verify", NONE, NULL, opt_unsupported, 0, NULL, NO_DEST},
	WL_OPT_END,
};

/* The bind addresses, once --check is known; the default is every address. */
static int finish(struct wl_node_cfg *cfg, bool check)
{
	wl_addr_offline(check);
	for (int b = 0; b < cfg->nbinds; b++) {
		char spec[sizeof(cfg->binds[b].text)];
		snprintf(spec, sizeof(spec), "%s", cfg->binds[b].text);
		if (wl_addr_parse_local(spec, &cfg->binds[b], "--bind-addr", WL_DEFAULT_PORT) < 0)
			return -1;
	}
	if (cfg->sched.policy == WL_SCHED_DEADLINE && (cfg->ncpus || cfg->cpus_auto))
		return wl_err("--sched deadline cannot be combined with -c: the kernel refuses SCHED_DEADLINE"
			      " threads pinned to a subset of the CPUs");
	if (cfg->nbinds == 0 && wl_addr_parse_local("tcp://0.0.0.0", &cfg->binds[cfg->nbinds++], "default bind",
						    WL_DEFAULT_PORT) < 0)
		return -1;
	return 0;
}

/* {"program":"wl-node","listen":["tcp://0.0.0.0:7891"]} */
static void check_json(FILE *out, const struct wl_node_cfg *cfg)
{
	fputs("{\"program\":\"wl-node\",\"listen\":[", out);
	for (int b = 0; b < cfg->nbinds; b++) {
		const struct wl_addr *a = &cfg->binds[b];
		char host[INET6_ADDRSTRLEN] = "";
		bool v6 = a->sa.ss_family == AF_INET6;
		if (!a->unresolved)
			inet_ntop(a->sa.ss_family, v6 ? (const void *)&((const struct sockaddr_in6 *)&a->sa)->sin6_addr
						       : (const void *)&((const struct sockaddr_in *)&a->sa)->sin_addr,
				  host, sizeof(host));
		fprintf(out, "%s\"%s://%s%s%s:%u\"", b ? "," : "", a->proto == WL_PROTO_UDP ? "udp" : "tcp", v6 ? "[" : "",
			a->unresolved ? a->host : host, v6 ? "]" : "", wl_addr_port(a));
	}
	fputs("]}\n", out);
}

enum wl_args_result wl_node_args(struct wl_node_cfg *cfg, int argc, char **argv)
{
	static struct wl_opt caps[17]; /* caps.c's rows */
	static const struct wl_opt *const tables[] = {options, caps, NULL};
	wl_caps_rows(caps, sizeof(caps) / sizeof(caps[0]));
	struct node_args a = {.cfg = cfg};
	struct wl_parser ps = {.prog = "wl-node", .synopsis = "[options]", .tables = tables, .settings = cfg, .ctx = &a};
	wl_set_plain_errors(true);
	int rc = wl_parse(&ps, argc, argv);
	if (rc == 0 && !ps.stop)
		rc = finish(cfg, a.check);
	wl_set_plain_errors(false);
	if (rc < 0)
		return WL_ARGS_BAD;
	if (ps.stop)
		return WL_ARGS_EXIT;
	if (a.check) {
		check_json(stdout, cfg);
		return WL_ARGS_EXIT;
	}
	return WL_ARGS_RUN;
}
