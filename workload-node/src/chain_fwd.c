/* chain_fwd: FORWARD on the command line, its sub-chains and their ends.
 *
 * -F T1[,T2..][,N|nack=N][,timeout=T][,retry=R][,ps=B][,rs=B][,branch] opens
 * a FORWARD: the ops that follow go to its targets until -R/--rs (DistWalk's
 * REPLY, optionally with the targets' reply size) or --fwd-end closes it.
 * Branches, where targets get different ops, are written two ways:
 *   DistWalk: -F a,branch -C 1 -F b,c,branch -C 2 -R  (one -F per branch; a
 *             branched -F right after or inside another joins its FORWARD)
 *   ours:     -F a,b,branch -C 1 --next-branch -C 2   (the targets of one -F
 *             share a chain until --next-branch gives each its own). */
#include "chain_args.h"
#include "opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_FWD_TIMEOUT_US 5000000 /* half the client's default: the node reports first */

struct fwd_parts {
	const char *targets[WL_MAX_TARGETS];
	int ntargets;
	long nack, retries;
	double timeout_us;
	bool nack_set, timeout_set, retries_set, branch;
	const char *ps, *rs;
};

static int number_part(const char *val, enum wl_unit unit, double lo, double hi, double *out, const char *spec,
		       const char *what)
{
	if (wl_parse_number(val, unit, out, what) < 0)
		return -1;
	if (*out < lo || *out > hi || (unit == WL_UNIT_COUNT && *out != (double)(long)*out))
		return wl_err("%s '%s': '%s' is not within %.0f..%.0f", what, spec, val, lo, hi);
	return 0;
}

static int fwd_part(char *tok, struct fwd_parts *f, const char *spec, const char *what)
{
	char *eq = strchr(tok, '=');
	const char *val = eq ? eq + 1 : tok;
	double x;
	bool digits = tok[0] && strspn(tok, "0123456789") == strlen(tok);
	if (digits || !strncmp(tok, "nack=", 5)) {
		if (number_part(val, WL_UNIT_COUNT, 1, WL_MAX_TARGETS, &x, spec, what) < 0)
			return -1;
		f->nack = (long)x;
		f->nack_set = true;
	} else if (!strncmp(tok, "timeout=", 8)) {
		if (number_part(val, WL_UNIT_TIME, 1, 4e9, &f->timeout_us, spec, what) < 0)
			return -1;
		f->timeout_set = true;
	} else if (!strncmp(tok, "retry=", 6) || !strncmp(tok, "retries=", 8)) {
		if (number_part(val, WL_UNIT_COUNT, 0, 255, &x, spec, what) < 0)
			return -1;
		f->retries = (long)x;
		f->retries_set = true;
	} else if (!strncmp(tok, "ps=", 3) || !strncmp(tok, "rs=", 3)) {
		const char *text = wl_keep(val, strlen(val));
		*(tok[0] == 'p' ? &f->ps : &f->rs) = text;
		return text ? 0 : -1;
	} else if (!strcmp(tok, "branch") || !strcmp(tok, "branching")) {
		f->branch = true;
	} else if (eq && strncmp(tok, "to=", 3)) {
		return wl_err("%s '%s': unknown key in '%s'", what, spec, tok);
	} else {
		if (f->ntargets == WL_MAX_TARGETS)
			return wl_err("%s '%s': more than %d targets", what, spec, WL_MAX_TARGETS);
		if (strlen(val) >= sizeof(((struct wl_addr *)0)->text))
			return wl_err("%s '%s': target '%s' is too long", what, spec, val);
		if (!(f->targets[f->ntargets++] = wl_keep(val, strlen(val))))
			return -1;
	}
	return 0;
}

static int parse_parts(const char *spec, struct fwd_parts *f, const char *what)
{
	const char *p = spec, *part;
	size_t n;
	while ((part = wl_spec_part(&p, &n))) {
		char tok[256];
		if (n == 0 || n >= sizeof(tok))
			return wl_err("%s '%s': %s part", what, spec, n ? "a too long" : "an empty");
		snprintf(tok, sizeof(tok), "%.*s", (int)n, part);
		if (fwd_part(tok, f, spec, what) < 0)
			return -1;
	}
	if (f->ntargets == 0)
		return wl_err("%s '%s': no target address", what, spec);
	return 0;
}

/* Sizes of the forwarded request and reply; those of joined -F options must agree. */
static int set_size(struct wl_value *v, const char *text, const char *what)
{
	if (v->text && text && strcmp(v->text, text))
		return wl_err("%s: one FORWARD has one size: '%s' and '%s' differ", what, v->text, text);
	return text ? wl_value_parse(text, WL_UNIT_BYTES, v, what) : 0;
}

static int apply_settings(struct wl_fwd_state *g, const struct fwd_parts *f, const char *what)
{
	struct wl_op_tmpl *op = g->op;
	if ((f->nack_set && g->nack_set && op->nack != f->nack) ||
	    (f->timeout_set && g->timeout_set && op->timeout_us != (uint32_t)f->timeout_us) ||
	    (f->retries_set && g->retries_set && op->retries != f->retries))
		return wl_err("%s: the branches of one FORWARD disagree on nack, timeout or retry", what);
	if (f->nack_set)
		op->nack = (uint8_t)f->nack;
	if (f->timeout_set)
		op->timeout_us = (uint32_t)f->timeout_us;
	if (f->retries_set)
		op->retries = (uint8_t)f->retries;
	g->nack_set |= f->nack_set;
	g->timeout_set |= f->timeout_set;
	g->retries_set |= f->retries_set;
	if (set_size(&op->req_size, f->ps, what) < 0 || set_size(&op->reply_size, f->rs, what) < 0)
		return -1;
	if (f->rs)
		g->reply_text = f->rs;
	return 0;
}

/* The targets of one -F, sharing one new chain, which becomes the current one. */
static int add_targets(struct wl_chain_args *ca, struct wl_op_tmpl *op, const struct fwd_parts *f, const char *what)
{
	if (op->ntargets + f->ntargets > WL_MAX_TARGETS)
		return wl_err("%s: more than %d targets in one FORWARD", what, WL_MAX_TARGETS);
	struct wl_chain_tmpl *c = wl_chain_new(op);
	if (!c)
		return -1;
	op->cur_branch = op->ntargets;
	for (int i = 0; i < f->ntargets; i++) {
		snprintf(op->targets[op->ntargets].text, sizeof(op->targets[0].text), "%s", f->targets[i]);
		op->sub[op->ntargets++] = c;
	}
	ca->wk->cur = c;
	return 0;
}

/* A branched -F joins the FORWARD whose branch is being written (closing
 * that branch, as DistWalk does) or the one closed just before it. */
static struct wl_fwd_state *branch_to_join(struct wl_chain_args *ca)
{
	struct wl_chain_tmpl *c = ca->wk->cur;
	if (c->owner && c->owner->branch)
		return wl_chain_fwd_state(ca, c->owner);
	struct wl_op_tmpl *last = c->n ? c->ops[c->n - 1] : NULL;
	return last && last->kind == WL_OP_FORWARD && last->branch ? wl_chain_fwd_state(ca, last) : NULL;
}

static struct wl_fwd_state *new_forward(struct wl_chain_args *ca, const char *spec)
{
	struct wl_chain_tmpl *parent = ca->wk->cur;
	struct wl_op_tmpl *op = wl_chain_append(ca, WL_OP_FORWARD);
	if (!op || wl_grow(&ca->fwds, &ca->cap, ca->nfwds, sizeof(*ca->fwds), 8) < 0) {
		wl_err("out of memory for a FORWARD");
		return NULL;
	}
	op->timeout_us = DEFAULT_FWD_TIMEOUT_US;
	wl_value_const(&op->req_size, WL_UNIT_BYTES, 0);
	wl_value_const(&op->reply_size, WL_UNIT_BYTES, 0);
	struct wl_fwd_state *g = &ca->fwds[ca->nfwds++];
	*g = (struct wl_fwd_state){.op = op, .parent = parent, .spec = spec};
	return g;
}

int wl_chain_forward(struct wl_chain_args *ca, const char *spec, const char *what)
{
	struct fwd_parts f = {0};
	if (parse_parts(spec, &f, what) < 0)
		return -1;
	struct wl_fwd_state *g = f.branch ? branch_to_join(ca) : NULL;
	if (g)
		ca->wk->cur = g->parent;
	else if (!(g = new_forward(ca, spec)))
		return -1;
	g->op->branch |= f.branch;
	g->ngroups++;
	return apply_settings(g, &f, what) < 0 ? -1 : add_targets(ca, g->op, &f, what);
}

int wl_chain_end_forward(struct wl_chain_args *ca, const char *what)
{
	struct wl_fwd_state *g = wl_chain_fwd_state(ca, ca->wk->cur->owner);
	if (!g)
		return wl_err("%s: no -F is open", what);
	ca->wk->cur = g->parent;
	return 0;
}

int wl_chain_next_branch(struct wl_chain_args *ca, const char *what)
{
	struct wl_chain_tmpl *cur = ca->wk->cur;
	struct wl_op_tmpl *op = cur->owner;
	if (!op || !op->branch)
		return wl_err("%s: the open -F has no 'branch' flag", what);
	int next = op->cur_branch + 1;
	if (next >= op->ntargets)
		return wl_err("%s: -F has only %u targets", what, op->ntargets);
	/* The targets of one -F share their chain until the first --next-branch:
	 * then each later one gets its own. */
	for (int t = next; t < op->ntargets; t++)
		if (op->sub[t] == cur && !(op->sub[t] = wl_chain_new(op)))
			return -1;
	op->cur_branch = next;
	ca->wk->cur = op->sub[next];
	return 0;
}

/* -R [[sendfile,][dev=0,]SIZE]: inside a -F, close it (its targets reply with
 * SIZE); at the top, SIZE is the node's reply to the client. sendfile is
 * DistWalk's LOAD joined to the REPLY: the replying node loads SIZE bytes,
 * then replies with SIZE bytes. */
int wl_chain_reply(struct wl_chain_args *ca, const char *spec, const char *what)
{
	struct wl_joined size = {0};
	bool sendfile = false;
	const char *p = spec ? spec : "", *part, *v;
	size_t n, vlen;
	while ((part = wl_spec_part(&p, &n))) {
		int rc = wl_spec_keyed(part, n, "dev", &v, &vlen, what);
		if (rc < 0 || (rc > 0 && !wl_spec_is(v, vlen, "0")))
			return rc < 0 ? -1 : wl_err("%s: dev=%.*s: wl-node has one storage device, dev=0", what, (int)vlen, v);
		if (rc == 0 && wl_spec_is(part, n, "sendfile"))
			sendfile = true;
		else if (rc == 0 && wl_spec_join(&size, part, n, what) < 0)
			return -1;
	}
	if (sendfile && !size.len)
		return wl_err("%s '%s': sendfile needs the size to send", what, spec);
	const char *text = size.len ? wl_spec_kept(&size, spec, what, "size") : NULL;
	if ((size.len && !text) || (sendfile && wl_chain_io(ca, WL_OP_LOAD, text, what) < 0))
		return -1;
	struct wl_fwd_state *g = wl_chain_fwd_state(ca, ca->wk->cur->owner);
	if (!g)
		return text ? wl_value_parse(text, WL_UNIT_BYTES, &ca->wk->reply_size, what) : 0;
	if (text && g->reply_text && strcmp(g->reply_text, text))
		return wl_err("%s: one FORWARD has one reply size: '%s' and '%s' differ", what, g->reply_text, text);
	if (text && wl_value_parse(text, WL_UNIT_BYTES, &g->op->reply_size, what) < 0)
		return -1;
	g->reply_text = text ? text : g->reply_text;
	ca->wk->cur = g->parent;
	return 0;
}

/* An offset option given after its op ("-S 10k --store-offset 0") still applies to it. */
static void fill_offsets(struct wl_workload *wk, struct wl_chain_tmpl *c)
{
	for (int i = 0; i < c->n; i++) {
		struct wl_op_tmpl *op = c->ops[i];
		if ((op->kind == WL_OP_LOAD || op->kind == WL_OP_STORE) && !op->has_offset) {
			bool st = op->kind == WL_OP_STORE;
			if (st ? wk->has_store_offset : wk->has_load_offset)
				op->offset = st ? wk->store_offset : wk->load_offset;
			else
				wl_value_const(&op->offset, WL_UNIT_BYTES, 0);
			op->has_offset = true;
		}
		if (op->kind == WL_OP_FORWARD)
			for (int t = 0; t < op->ntargets; t++)
				if (t == 0 || op->sub[t] != op->sub[t - 1])
					fill_offsets(wk, op->sub[t]);
	}
}

int wl_chain_finish(struct wl_chain_args *ca)
{
	for (size_t i = 0; i < ca->nfwds; i++) {
		struct wl_op_tmpl *op = ca->fwds[i].op;
		if (op->nack == 0)
			op->nack = op->ntargets; /* default: wait for all */
		if (op->nack > op->ntargets)
			return wl_err("-F '%s': nack %u is above the %u targets", ca->fwds[i].spec, op->nack, op->ntargets);
		for (int t = 0; t < op->ntargets; t++) {
			char spec[sizeof(op->targets[t].text)];
			snprintf(spec, sizeof(spec), "%s", op->targets[t].text);
			if (wl_addr_parse(spec, &op->targets[t], "-F") < 0)
				return -1;
		}
	}
	fill_offsets(ca->wk, &ca->wk->root);
	return 0;
}
