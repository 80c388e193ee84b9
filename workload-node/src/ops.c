/* ops: per-request encoding of the chain templates (chain_args.c builds them). */
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

static uint64_t draw_u64(struct wl_value *v, struct wl_rng *rng, double scale)
{
	double x = wl_value_next(v, rng) * scale;
	return x <= 0 ? 0 : x >= 1.8e19 ? UINT64_MAX : (uint64_t)llround(x);
}

static int encode_chain(struct wl_chain_tmpl *c, struct wl_buf *b, struct wl_rng *rng, uint64_t seq);

static int encode_forward(struct wl_op_tmpl *op, struct wl_buf *b, struct wl_rng *rng, uint64_t seq)
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
		if (encode_chain(op->sub[t], b, rng, seq) < 0)
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

/* seq: the request's index within its pair (--skip every=). */
static int encode_chain(struct wl_chain_tmpl *c, struct wl_buf *b, struct wl_rng *rng, uint64_t seq)
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
		case WL_OP_SKIP: {
			bool turn = op->skip_every <= 1 || seq % op->skip_every == 0; /* otherwise never skips */
			at = wl_put_op_begin(b, op->kind, 0);
			wl_put_u32(b, turn ? (uint32_t)fmin(op->amount.constant * 4294967296.0, 4294967295.0) : 0);
			/* The draw travels with the request so a seeded run is reproducible. */
			wl_put_u32(b, op->amount.constant >= 1.0 ? 0 : (uint32_t)(wl_rng_u64(rng) >> 32));
			wl_put_u16(b, op->skip_count);
			wl_put_op_end(b, at);
			break;
		}
		case WL_OP_FORWARD:
			if (encode_forward(op, b, rng, seq) < 0)
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
	if (encode_chain(&wk->root, b, rng, id & WL_SEQ_MASK) < 0)
		return -1;
	uint64_t want = draw_u64(&wk->req_size, rng, 1);
	if (want > b->len - at)
		wl_put_zeros(b, (want > WL_MAX_MSG ? WL_MAX_MSG : want) - (b->len - at));
	wl_finish_msg(b, at);
	return wl_enc_ok(b);
}
