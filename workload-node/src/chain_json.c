/* chain_json: what --check prints: the parsed command line as one JSON
 * object on one line, values as written, for Collapsar's topology check:
 *   {"program":"wl-client","to":"front","port":7891,"proto":"tcp","chain":[OP,...]}
 * OP: {"op":"compute","time":"10ms"[,"clock":"wall|loop"]}
 *     {"op":"load","bytes":"1k"[,"offset":"..."]}
 *     {"op":"store","bytes":"1k","sync":"nosync|sync|psync"[,"offset":"..."]}
 *     {"op":"skip","count":1,"prob":0.5,"every":1}
 *     {"op":"forward","to":["db","db-2"],"port":7891,"nack":2,"proto":"tcp",
 *      "chain":[OP,...]} (or "branches":[[OP,...],...], one chain per target;
 *      "ports"/"protos" list each target's when they differ) */
#include "client_args.h"

#include <arpa/inet.h>

static void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

/* The host as written; the address a run would use when none was written. */
static void host_json(FILE *out, const struct wl_addr *a)
{
	char host[INET6_ADDRSTRLEN] = "";
	if (!a->host[0] && !a->unresolved) {
		const void *raw = a->sa.ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)&a->sa)->sin6_addr
							      : (const void *)&((const struct sockaddr_in *)&a->sa)->sin_addr;
		inet_ntop(a->sa.ss_family, raw, host, sizeof(host));
	}
	json_string(out, a->host[0] ? a->host : host);
}

static const char *proto_name(int proto) { return proto == WL_PROTO_UDP ? "udp" : "tcp"; }

static void chain_json(FILE *out, const struct wl_chain_tmpl *c);

/* "to", "port", "nack", "proto" and, where targets differ, "ports"/"protos". */
static void targets_json(FILE *out, const struct wl_op_tmpl *op)
{
	bool ports_differ = false, protos_differ = false;
	fputs("\"to\":[", out);
	for (int t = 0; t < op->ntargets; t++) {
		fputs(t ? "," : "", out);
		host_json(out, &op->targets[t]);
		ports_differ |= wl_addr_port(&op->targets[t]) != wl_addr_port(&op->targets[0]);
		protos_differ |= op->targets[t].proto != op->targets[0].proto;
	}
	fprintf(out, "],\"port\":%u,\"nack\":%u,\"proto\":\"%s\"", wl_addr_port(&op->targets[0]), op->nack,
		proto_name(op->targets[0].proto));
	if (ports_differ)
		for (int t = 0; t < op->ntargets; t++)
			fprintf(out, "%s%u", t ? "," : ",\"ports\":[", wl_addr_port(&op->targets[t]));
	fputs(ports_differ ? "]" : "", out);
	if (protos_differ)
		for (int t = 0; t < op->ntargets; t++)
			fprintf(out, "%s\"%s\"", t ? "," : ",\"protos\":[", proto_name(op->targets[t].proto));
	fputs(protos_differ ? "]" : "", out);
}

static void forward_json(FILE *out, const struct wl_op_tmpl *op)
{
	fputs("{\"op\":\"forward\",", out);
	targets_json(out, op);
	if (op->branch) {
		fputs(",\"branches\":[", out);
		for (int t = 0; t < op->ntargets; t++) {
			fputs(t ? "," : "", out);
			chain_json(out, op->sub[t]);
		}
		fputs("]}", out);
		return;
	}
	fputs(",\"chain\":", out);
	chain_json(out, op->sub[0]);
	fputc('}', out);
}

static void io_json(FILE *out, const struct wl_op_tmpl *op)
{
	static const char *const sync[] = {[WL_SYNC_NONE] = "nosync", [WL_SYNC_EACH] = "sync",
					   [WL_SYNC_PERIODIC] = "psync"};
	fprintf(out, "{\"op\":\"%s\",\"bytes\":", op->kind == WL_OP_LOAD ? "load" : "store");
	json_string(out, op->amount.text);
	if (op->kind == WL_OP_STORE)
		fprintf(out, ",\"sync\":\"%s\"", op->flags <= WL_SYNC_PERIODIC ? sync[op->flags] : "?");
	if (op->has_offset && op->offset.text) {
		fputs(",\"offset\":", out);
		json_string(out, op->offset.text);
	}
	fputc('}', out);
}

static void op_json(FILE *out, const struct wl_op_tmpl *op)
{
	switch (op->kind) {
	case WL_OP_COMPUTE:
		fputs("{\"op\":\"compute\",\"time\":", out);
		json_string(out, op->amount.text);
		if (op->flags)
			fprintf(out, ",\"clock\":\"%s\"", op->flags & WL_COMPUTE_WALL ? "wall" : "loop");
		fputc('}', out);
		break;
	case WL_OP_LOAD:
	case WL_OP_STORE:
		io_json(out, op);
		break;
	case WL_OP_SKIP:
		fprintf(out, "{\"op\":\"skip\",\"count\":%u,\"prob\":%g,\"every\":%u}", op->skip_count,
			op->amount.constant, op->skip_every);
		break;
	case WL_OP_FORWARD:
		forward_json(out, op);
		break;
	}
}

static void chain_json(FILE *out, const struct wl_chain_tmpl *c)
{
	fputc('[', out);
	for (int i = 0; i < c->n; i++) {
		fputs(i ? "," : "", out);
		op_json(out, c->ops[i]);
	}
	fputc(']', out);
}

void wl_client_check_json(FILE *out, const struct client *cl)
{
	fputs("{\"program\":\"wl-client\",\"to\":", out);
	host_json(out, &cl->to);
	fprintf(out, ",\"port\":%u,\"proto\":\"%s\",\"chain\":", wl_addr_port(&cl->to), proto_name(cl->to.proto));
	chain_json(out, &cl->wk.root);
	fputs("}\n", out);
}
