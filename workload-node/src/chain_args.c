/* chain_args: the operation options, in command-line order, into chain
 * templates (FORWARD and its ends: chain_fwd.c). DistWalk's forms and ours
 * are both read: "-S sync,65536" and "-S 10k,sync"; "-L 1k" and
 * "-L size=[unif:min=0:max=1023],offset=[unif:min=0:max=3071]";
 * "--skip 1,prob=0.5,every=2". A value inside [...] may hold commas;
 * outside, commas separate parts. */
#include "chain_args.h"
#include "opts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wl_chain_args_init(struct wl_chain_args *ca, struct wl_workload *wk)
{
	*ca = (struct wl_chain_args){.wk = wk};
}

const char *wl_spec_part(const char **p, size_t *len)
{
	const char *start = *p, *q = start;
	if (!*start)
		return NULL;
	for (int depth = 0; *q && (depth > 0 || *q != ','); q++)
		depth += (*q == '[') - (*q == ']');
	*len = (size_t)(q - start);
	*p = *q ? q + 1 : q;
	return start;
}

bool wl_spec_is(const char *part, size_t n, const char *word) { return strlen(word) == n && !strncmp(part, word, n); }

int wl_spec_keyed(const char *part, size_t n, const char *key, const char **value, size_t *vlen, const char *what)
{
	size_t k = strlen(key);
	if (n <= k || strncmp(part, key, k) || part[k] != '=')
		return 0;
	*value = part + k + 1;
	*vlen = n - k - 1;
	if (**value == '[') {
		if (*vlen < 2 || (*value)[*vlen - 1] != ']')
			return wl_err("%s: '%.*s': a '[' without its closing ']'", what, (int)n, part);
		(*value)++;
		*vlen -= 2;
	}
	return 1;
}

int wl_spec_join(struct wl_joined *j, const char *part, size_t n, const char *what)
{
	if (n == 0)
		return wl_err("%s: an empty part between commas", what);
	if (j->len + n + 2 > sizeof(j->text))
		return wl_err("%s: value spec too long", what);
	if (j->len)
		j->text[j->len++] = ',';
	memcpy(j->text + j->len, part, n);
	j->len += n;
	j->text[j->len] = '\0';
	return 0;
}

const char *wl_spec_kept(const struct wl_joined *j, const char *spec, const char *what, const char *needed)
{
	if (!j->len) {
		wl_err("%s '%s': no %s given", what, spec, needed);
		return NULL;
	}
	return strcmp(j->text, spec) ? wl_keep(j->text, j->len) : spec;
}

struct wl_op_tmpl *wl_chain_append(struct wl_chain_args *ca, uint8_t kind)
{
	struct wl_chain_tmpl *c = ca->wk->cur;
	struct wl_op_tmpl *op;
	if (c->n == WL_MAX_OPS) {
		wl_err("more than %d operations in one chain", WL_MAX_OPS);
		return NULL;
	}
	if (wl_grow(&c->ops, &c->cap, (size_t)c->n, sizeof(*c->ops), 8) < 0 || !(op = calloc(1, sizeof(*op)))) {
		wl_err("out of memory for %d operations", c->n + 1);
		return NULL;
	}
	op->kind = kind;
	c->ops[c->n++] = op;
	return op;
}

struct wl_chain_tmpl *wl_chain_new(struct wl_op_tmpl *owner)
{
	struct wl_chain_tmpl *c = calloc(1, sizeof(*c));
	if (!c)
		wl_err("out of memory for a sub-chain");
	else
		c->owner = owner;
	return c;
}

struct wl_fwd_state *wl_chain_fwd_state(struct wl_chain_args *ca, const struct wl_op_tmpl *op)
{
	for (size_t i = 0; i < ca->nfwds; i++)
		if (ca->fwds[i].op == op)
			return &ca->fwds[i];
	return NULL;
}

int wl_chain_compute(struct wl_chain_args *ca, const char *spec, const char *what)
{
	struct wl_joined value = {0};
	bool wall = false, loop = false;
	const char *p = spec, *part;
	size_t n;
	while ((part = wl_spec_part(&p, &n))) {
		if (wl_spec_is(part, n, "wall") || wl_spec_is(part, n, "loop") || wl_spec_is(part, n, "cpu")) {
			wall |= wl_spec_is(part, n, "wall");
			loop |= wl_spec_is(part, n, "loop");
		} else if (wl_spec_join(&value, part, n, what) < 0) {
			return -1;
		}
	}
	if (wall && loop)
		return wl_err("%s '%s': wall and loop exclude each other", what, spec);
	const char *text = wl_spec_kept(&value, spec, what, "time");
	struct wl_op_tmpl *op = text ? wl_chain_append(ca, WL_OP_COMPUTE) : NULL;
	if (!op || wl_value_parse(text, WL_UNIT_TIME, &op->amount, what) < 0)
		return -1;
	op->flags = wall ? WL_COMPUTE_WALL : loop ? WL_COMPUTE_LOOP : 0;
	return 0;
}

struct io_parts {
	struct wl_joined size;
	bool size_keyed;
	const char *offset;
	size_t offset_len;
	int sync; /* enum wl_sync, -1 when not given */
};

static int io_part(const char *part, size_t n, uint8_t kind, struct io_parts *io, const char *what)
{
	static const char *const syncs[] = {[WL_SYNC_NONE] = "nosync", [WL_SYNC_EACH] = "sync",
					    [WL_SYNC_PERIODIC] = "psync"};
	const char *v;
	size_t vlen;
	int rc;
	if ((rc = wl_spec_keyed(part, n, "offset", &v, &vlen, what)) != 0) {
		if (rc < 0 || io->offset)
			return rc < 0 ? -1 : wl_err("%s: offset given twice", what);
		io->offset = v;
		io->offset_len = vlen;
		return 0;
	}
	if ((rc = wl_spec_keyed(part, n, "dev", &v, &vlen, what)) != 0) /* DistWalk's storage device: a node has one */
		return rc < 0 || wl_spec_is(v, vlen, "0") ? rc : wl_err("%s: dev=%.*s: wl-node has one storage device, dev=0",
								 what, (int)vlen, v);
	for (int s = 0; s < 3; s++) {
		if (!wl_spec_is(part, n, syncs[s]))
			continue;
		if (kind != WL_OP_STORE)
			return wl_err("%s: '%s' applies to -S only", what, syncs[s]);
		if (io->sync >= 0)
			return wl_err("%s: the sync mode given twice", what);
		io->sync = s;
		return 0;
	}
	if ((rc = wl_spec_keyed(part, n, "size", &v, &vlen, what)) != 0) {
		if (rc < 0 || io->size.len)
			return rc < 0 ? -1 : wl_err("%s: the size given twice", what);
		io->size_keyed = true;
		return wl_spec_join(&io->size, v, vlen, what);
	}
	if (io->size_keyed)
		return wl_err("%s: the size given twice (size= and '%.*s')", what, (int)n, part);
	return wl_spec_join(&io->size, part, n, what);
}

/* LOAD and STORE. A STORE syncs unless told otherwise, as in DistWalk. */
int wl_chain_io(struct wl_chain_args *ca, uint8_t kind, const char *spec, const char *what)
{
	struct io_parts io = {.sync = -1};
	const char *p = spec, *part;
	size_t n;
	while ((part = wl_spec_part(&p, &n)))
		if (io_part(part, n, kind, &io, what) < 0)
			return -1;
	const char *size = wl_spec_kept(&io.size, spec, what, "size");
	const char *offset = io.offset ? wl_keep(io.offset, io.offset_len) : NULL;
	struct wl_op_tmpl *op = size && (offset || !io.offset) ? wl_chain_append(ca, kind) : NULL;
	if (!op || wl_value_parse(size, WL_UNIT_BYTES, &op->amount, what) < 0)
		return -1;
	if (kind == WL_OP_STORE)
		op->flags = (uint8_t)(io.sync < 0 ? WL_SYNC_EACH : io.sync);
	struct wl_workload *wk = ca->wk;
	bool has_default = kind == WL_OP_STORE ? wk->has_store_offset : wk->has_load_offset;
	if (offset) {
		if (wl_value_parse(offset, WL_UNIT_BYTES, &op->offset, what) < 0)
			return -1;
		op->has_offset = true;
	} else if (has_default) {
		op->offset = kind == WL_OP_STORE ? wk->store_offset : wk->load_offset;
		op->has_offset = true;
	}
	return 0;
}

int wl_chain_offset(struct wl_chain_args *ca, uint8_t kind, const char *spec, const char *what)
{
	struct wl_workload *wk = ca->wk;
	struct wl_value *v = kind == WL_OP_STORE ? &wk->store_offset : &wk->load_offset;
	if (wl_value_parse(spec, WL_UNIT_BYTES, v, what) < 0)
		return -1;
	*(kind == WL_OP_STORE ? &wk->has_store_offset : &wk->has_load_offset) = true;
	return 0;
}

static int whole(const char *text, size_t n, long lo, long hi, long *out, const char *spec, const char *what)
{
	char buf[32], *end;
	snprintf(buf, sizeof(buf), "%.*s", (int)n, text);
	*out = strtol(buf, &end, 10);
	if (n == 0 || n >= sizeof(buf) || *end || *out < lo || *out > hi)
		return wl_err("%s '%s': '%.*s' is not a whole number within %ld..%ld", what, spec, (int)n, text, lo, hi);
	return 0;
}

/* N[,prob=P][,every=M]: skip the next N ops with probability P, on every M-th request. */
int wl_chain_skip(struct wl_chain_args *ca, const char *spec, const char *what)
{
	long count = 1, every = 1;
	double prob = 1.0;
	const char *p = spec, *part, *v;
	size_t n, vlen;
	while ((part = wl_spec_part(&p, &n))) {
		int rc_prob = wl_spec_keyed(part, n, "prob", &v, &vlen, what);
		int rc_every = wl_spec_keyed(part, n, "every", &v, &vlen, what);
		if (rc_prob < 0 || rc_every < 0)
			return -1;
		if (rc_prob) {
			char buf[32];
			snprintf(buf, sizeof(buf), "%.*s", (int)vlen, v);
			if (wl_parse_number(buf, WL_UNIT_RATIO, &prob, what) < 0)
				return -1;
			if (prob < 0 || prob > 1)
				return wl_err("%s '%s': prob must be within 0..1", what, spec);
		} else if (rc_every ? whole(v, vlen, 1, UINT32_MAX, &every, spec, what) < 0
				    : whole(part, n, 1, 65535, &count, spec, what) < 0) {
			return -1;
		}
	}
	struct wl_op_tmpl *op = wl_chain_append(ca, WL_OP_SKIP);
	if (!op)
		return -1;
	op->skip_count = (uint16_t)count;
	op->skip_every = (uint32_t)every;
	wl_value_const(&op->amount, WL_UNIT_RATIO, prob);
	return 0;
}

int wl_chain_request_size(struct wl_chain_args *ca, const char *spec, const char *what)
{
	return wl_value_parse(spec, WL_UNIT_BYTES, &ca->wk->req_size, what);
}

