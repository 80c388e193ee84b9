/* ops: chain templates and per-request encoding. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wl_workload_init(struct wl_workload *wk)
{
	memset(wk, 0, sizeof(*wk));
	wk->cur = &wk->root;
	wl_value_const(&wk->req_size, WL_UNIT_BYTES, 0);
	wl_value_const(&wk->reply_size, WL_UNIT_BYTES, 0);
}

static struct wl_op_tmpl *append(struct wl_workload *wk, uint8_t kind)
{
	struct wl_chain_tmpl *c = wk->cur;
	if (c->n == WL_MAX_OPS) {
		wl_err("more than %d operations in one chain", WL_MAX_OPS);
		return NULL;
	}
	if (wl_grow(&c->ops, &c->cap, (size_t)c->n, sizeof(*c->ops), 8) < 0) {
		wl_err("out of memory for %d operations", c->n + 1);
		return NULL;
	}
	struct wl_op_tmpl *op = calloc(1, sizeof(*op));
	if (!op) {
		wl_err("out of memory for an operation");
		return NULL;
	}
	op->kind = kind;
	c->ops[c->n++] = op;
	return op;
}

static int only_flags(const struct wl_value *v, const char *const *allowed, const char *what)
{
	for (int i = 0; i < v->nflags; i++) {
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok |= !strcmp(v->flags[i], *a);
		if (!ok)
			return wl_err("%s: unexpected word '%s'", what, v->flags[i]);
	}
	return 0;
}

int wl_workload_compute(struct wl_workload *wk, const char *spec)
{
	static const char *const allowed[] = {"wall", "cpu", "loop", NULL};
	struct wl_op_tmpl *op = append(wk, WL_OP_COMPUTE);
	if (!op || wl_value_parse(spec, WL_UNIT_TIME, &op->amount, "-C") < 0 || only_flags(&op->amount, allowed, "-C") < 0)
		return -1;
	op->flags = wl_value_has_flag(&op->amount, "wall") ? WL_COMPUTE_WALL
		    : wl_value_has_flag(&op->amount, "loop") ? WL_COMPUTE_LOOP : 0;
	return 0;
}

int wl_workload_io(struct wl_workload *wk, uint8_t kind, const char *spec)
{
	static const char *const store_flags[] = {"sync", "nosync", "psync", NULL}, *const none[] = {NULL};
	const char *what = kind == WL_OP_STORE ? "-S" : "-L";
	struct wl_op_tmpl *op = append(wk, kind);
	if (!op || wl_value_parse(spec, WL_UNIT_BYTES, &op->amount, what) < 0 ||
	    only_flags(&op->amount, kind == WL_OP_STORE ? store_flags : none, what) < 0)
		return -1;
	if (wl_value_has_flag(&op->amount, "sync"))
		op->flags = WL_SYNC_EACH;
	else if (wl_value_has_flag(&op->amount, "psync"))
		op->flags = WL_SYNC_PERIODIC;
	bool has = kind == WL_OP_STORE ? wk->has_store_offset : wk->has_load_offset;
	if (has) {
		op->offset = kind == WL_OP_STORE ? wk->store_offset : wk->load_offset;
		op->has_offset = true;
	}
	return 0;
}

int wl_workload_offset(struct wl_workload *wk, uint8_t kind, const char *spec)
{
	struct wl_value *v = kind == WL_OP_STORE ? &wk->store_offset : &wk->load_offset;
	if (wl_value_parse(spec, WL_UNIT_BYTES, v, kind == WL_OP_STORE ? "--store-offset" : "--load-offset") < 0)
		return -1;
	*(kind == WL_OP_STORE ? &wk->has_store_offset : &wk->has_load_offset) = true;
	return 0;
}

int wl_workload_skip(struct wl_workload *wk, const char *spec)
{
	struct wl_op_tmpl *op = append(wk, WL_OP_SKIP);
	if (!op)
		return -1;
	char copy[128], *save, *tok;
	snprintf(copy, sizeof(copy), "%s", spec);
	op->skip_count = 1;
	wl_value_const(&op->amount, WL_UNIT_RATIO, 1.0);
	for (tok = strtok_r(copy, ",:", &save); tok; tok = strtok_r(NULL, ",:", &save)) {
		double v;
		if (!strncmp(tok, "prob=", 5)) {
			if (wl_parse_number(tok + 5, WL_UNIT_RATIO, &v, "--skip prob") < 0)
				return -1;
			if (v < 0 || v > 1)
				return wl_err("--skip '%s': prob must be within 0..1", spec);
			op->amount.constant = v;
		} else {
			if (wl_parse_number(tok, WL_UNIT_COUNT, &v, "--skip") < 0)
				return -1;
			if (v < 1 || v > 65535 || v != floor(v))
				return wl_err("--skip '%s': the op count must be 1..65535", spec);
			op->skip_count = (uint16_t)v;
		}
	}
	return 0;
}

static struct wl_chain_tmpl *new_chain(struct wl_op_tmpl *owner)
{
	struct wl_chain_tmpl *c = calloc(1, sizeof(*c));
	if (!c)
		wl_err("out of memory for a sub-chain");
	else
		c->owner = owner;
	return c;
}

static int forward_token(struct wl_op_tmpl *op, const char *tok, const char *spec)
{
	double v;
	const char *eq = strchr(tok, '=');
	bool digits = tok[0] && strspn(tok, "0123456789") == strlen(tok);
	if (digits || !strncmp(tok, "nack=", 5)) {
		if (wl_parse_number(digits ? tok : tok + 5, WL_UNIT_COUNT, &v, "-F nack") < 0)
			return -1;
		op->nack = (uint8_t)(v > 255 ? 255 : v);
		if (v < 1)
			return wl_err("-F '%s': nack must be at least 1", spec);
	} else if (eq && !strncmp(tok, "timeout=", 8)) {
		if (wl_parse_number(tok + 8, WL_UNIT_TIME, &v, "-F timeout") < 0)
			return -1;
		if (v < 1 || v > 4e9)
			return wl_err("-F '%s': timeout must be 1us..4000s", spec);
		op->timeout_us = (uint32_t)v;
	} else if (eq && (!strncmp(tok, "retry=", 6) || !strncmp(tok, "retries=", 8))) {
		if (wl_parse_number(eq + 1, WL_UNIT_COUNT, &v, "-F retry") < 0)
			return -1;
		if (v > 255)
			return wl_err("-F '%s': at most 255 retries", spec);
		op->retries = (uint8_t)v;
	} else if (eq && (!strncmp(tok, "ps=", 3) || !strncmp(tok, "rs=", 3))) {
		if (wl_value_parse(eq + 1, WL_UNIT_BYTES, tok[0] == 'p' ? &op->req_size : &op->reply_size, "-F size") < 0)
			return -1;
	} else if (!strcmp(tok, "branch") || !strcmp(tok, "branching")) {
		op->branch = true;
	} else if (eq && strncmp(tok, "to=", 3)) {
		return wl_err("-F '%s': unknown key in '%s'", spec, tok);
	} else {
		if (op->ntargets == WL_MAX_TARGETS)
			return wl_err("-F '%s': more than %d targets", spec, WL_MAX_TARGETS);
		struct wl_addr *a = &op->targets[op->ntargets];
		if (wl_addr_parse(eq ? eq + 1 : tok, a, "-F") < 0)
			return -1;
		op->ntargets++;
	}
	return 0;
}

int wl_workload_forward(struct wl_workload *wk, const char *spec)
{
	struct wl_op_tmpl *op = append(wk, WL_OP_FORWARD);
	if (!op)
		return -1;
	op->timeout_us = 5000000; /* half the client's default timeout: the node reports first */
	wl_value_const(&op->req_size, WL_UNIT_BYTES, 0);
	wl_value_const(&op->reply_size, WL_UNIT_BYTES, 0);
	char copy[1024], *save, *tok;
	if (strlen(spec) >= sizeof(copy))
		return wl_err("-F: spec too long");
	strcpy(copy, spec);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (forward_token(op, tok, spec) < 0)
			return -1;
	if (op->ntargets == 0)
		return wl_err("-F '%s': no target address", spec);
	if (op->nack == 0)
		op->nack = op->ntargets; /* default: wait for all */
	if (op->nack > op->ntargets)
		return wl_err("-F '%s': nack %u is above the %u targets", spec, op->nack, op->ntargets);
	for (int i = 0; i < op->ntargets; i++) {
		if (i == 0 || op->branch) {
			if (!(op->sub[i] = new_chain(op)))
				return -1;
		} else {
			op->sub[i] = op->sub[0];
		}
	}
	wk->cur = op->sub[0];
	return 0;
}

static struct wl_chain_tmpl *parent_of(struct wl_workload *wk, struct wl_chain_tmpl *c);

int wl_workload_end_forward(struct wl_workload *wk)
{
	if (!wk->cur->owner)
		return wl_err("--fwd-end: no -F is open");
	wk->cur = parent_of(wk, wk->cur);
	return wk->cur ? 0 : wl_err("--fwd-end: internal: parent chain not found");
}

int wl_workload_next_branch(struct wl_workload *wk)
{
	struct wl_op_tmpl *op = wk->cur->owner;
	if (!op || !op->branch)
		return wl_err("--next-branch: the open -F has no 'branch' flag");
	if (op->cur_branch + 1 >= op->ntargets)
		return wl_err("--next-branch: -F has only %u targets", op->ntargets);
	wk->cur = op->sub[++op->cur_branch];
	return 0;
}

static bool contains(struct wl_chain_tmpl *c, struct wl_chain_tmpl *want, struct wl_chain_tmpl **parent)
{
	for (int i = 0; i < c->n; i++) {
		struct wl_op_tmpl *op = c->ops[i];
		if (op->kind != WL_OP_FORWARD)
			continue;
		for (int t = 0; t < op->ntargets; t++) {
			if (op->sub[t] == want) {
				*parent = c;
				return true;
			}
			if ((t == 0 || op->branch) && contains(op->sub[t], want, parent))
				return true;
		}
	}
	return false;
}

static struct wl_chain_tmpl *parent_of(struct wl_workload *wk, struct wl_chain_tmpl *c)
{
	struct wl_chain_tmpl *p = NULL;
	return contains(&wk->root, c, &p) ? p : NULL;
}

int wl_workload_size(struct wl_workload *wk, bool reply, const char *spec)
{
	struct wl_op_tmpl *owner = wk->cur->owner;
	struct wl_value *v = owner ? (reply ? &owner->reply_size : &owner->req_size)
				   : (reply ? &wk->reply_size : &wk->req_size);
	return wl_value_parse(spec, WL_UNIT_BYTES, v, reply ? "--rs" : "--ps");
}

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
				if (t == 0 || op->branch)
					fill_offsets(wk, op->sub[t]);
	}
}

int wl_workload_finish(struct wl_workload *wk)
{
	/* An offset option given after its op (e.g. "-S 10k --store-offset 0") still applies to it. */
	fill_offsets(wk, &wk->root);
	return 0;
}

static uint64_t draw_u64(struct wl_value *v, struct wl_rng *rng, double scale)
{
	double x = wl_value_next(v, rng) * scale;
	return x <= 0 ? 0 : x >= 1.8e19 ? UINT64_MAX : (uint64_t)llround(x);
}

static int encode_chain(struct wl_chain_tmpl *c, struct wl_buf *b, struct wl_rng *rng);

static int encode_forward(struct wl_op_tmpl *op, struct wl_buf *b, struct wl_rng *rng)
{
	size_t at = wl_put_op_begin(b, WL_OP_FORWARD, 0);
	wl_put_u32(b, op->timeout_us);
	wl_put_u8(b, op->retries);
	wl_put_u8(b, op->nack);
	wl_put_u8(b, op->ntargets);
	wl_put_u8(b, 0);
	for (int t = 0; t < op->ntargets; t++) {
		uint8_t raw[16];
		wl_addr_raw(&op->targets[t], raw);
		wl_put_u8(b, (uint8_t)op->targets[t].proto);
		wl_put_u8(b, (uint8_t)wl_addr_family(&op->targets[t]));
		wl_put_u16(b, wl_addr_port(&op->targets[t]));
		wl_put_bytes(b, raw, 16);
		size_t sizes_at = b->len;
		wl_put_u32(b, 0); /* pad_len, known once the chain is encoded */
		uint64_t reply = draw_u64(&op->reply_size, rng, 1);
		wl_put_u32(b, (uint32_t)(reply < WL_REPLY_MIN ? WL_REPLY_MIN : reply > WL_MAX_MSG ? WL_MAX_MSG : reply));
		size_t chain_at = b->len;
		wl_put_u32(b, 0);
		if (encode_chain(op->sub[t], b, rng) < 0)
			return -1;
		uint32_t chain_len = (uint32_t)(b->len - chain_at - 4);
		uint64_t want = draw_u64(&op->req_size, rng, 1), base = WL_HDR_LEN + 4 + chain_len;
		wl_patch_u32(b, sizes_at, (uint32_t)(want > base ? (want > WL_MAX_MSG ? WL_MAX_MSG : want) - base : 0));
		wl_patch_u32(b, chain_at, chain_len);
	}
	if (b->len - at - 4 > UINT16_MAX)
		return wl_err("-F: the nested chain encodes to %zu bytes, above the 65535 limit", b->len - at - 4);
	wl_put_op_end(b, at);
	return 0;
}

static int encode_chain(struct wl_chain_tmpl *c, struct wl_buf *b, struct wl_rng *rng)
{
	wl_put_u16(b, (uint16_t)c->n);
	for (int i = 0; i < c->n; i++) {
		struct wl_op_tmpl *op = c->ops[i];
		size_t at;
		switch (op->kind) {
		case WL_OP_COMPUTE:
			at = wl_put_op_begin(b, op->kind, op->flags);
			wl_put_u64(b, draw_u64(&op->amount, rng, 1000.0)); /* us -> ns */
			wl_put_op_end(b, at);
			break;
		case WL_OP_LOAD:
		case WL_OP_STORE: {
			at = wl_put_op_begin(b, op->kind, op->flags);
			uint64_t bytes = draw_u64(&op->amount, rng, 1);
			wl_put_u64(b, draw_u64(&op->offset, rng, 1));
			wl_put_u32(b, (uint32_t)(bytes > WL_MAX_IO ? WL_MAX_IO : bytes));
			wl_put_op_end(b, at);
			break;
		}
		case WL_OP_SKIP:
			at = wl_put_op_begin(b, op->kind, 0);
			wl_put_u32(b, (uint32_t)fmin(op->amount.constant * 4294967296.0, 4294967295.0));
			/* The draw travels with the request so a seeded run is reproducible. */
			wl_put_u32(b, op->amount.constant >= 1.0 ? 0 : (uint32_t)(wl_rng_u64(rng) >> 32));
			wl_put_u16(b, op->skip_count);
			wl_put_op_end(b, at);
			break;
		case WL_OP_FORWARD:
			if (encode_forward(op, b, rng) < 0)
				return -1;
			break;
		}
	}
	return 0;
}

int wl_workload_encode(struct wl_workload *wk, struct wl_buf *b, uint64_t id, const uint8_t trace_id[16],
		       const uint8_t parent_span[8], struct wl_rng *rng)
{
	size_t at = wl_put_hdr(b, WL_MSG_REQUEST, id, trace_id, parent_span);
	uint64_t reply = draw_u64(&wk->reply_size, rng, 1);
	wl_put_u32(b, (uint32_t)(reply < WL_REPLY_MIN ? WL_REPLY_MIN : reply > WL_MAX_MSG ? WL_MAX_MSG : reply));
	if (encode_chain(&wk->root, b, rng) < 0)
		return -1;
	uint64_t want = draw_u64(&wk->req_size, rng, 1);
	if (want > b->len - at)
		wl_put_zeros(b, (want > WL_MAX_MSG ? WL_MAX_MSG : want) - (b->len - at));
	wl_finish_msg(b, at);
	return wl_enc_ok(b);
}
