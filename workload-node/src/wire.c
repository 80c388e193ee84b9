/* wire: encoder and strict decoder for the request/reply format. */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) << 32 | rd32(p + 4); }

#define BAD(reason) do { *why = (reason); return -1; } while (0)

int wl_decode_hdr(const uint8_t *msg, size_t n, struct wl_hdr *hdr, const char **why)
{
	if (n < WL_HDR_LEN)
		BAD("truncated header");
	if (rd32(msg) != WL_MAGIC)
		BAD("bad magic");
	if (msg[4] != WL_VERSION)
		BAD("unsupported version");
	hdr->type = msg[5];
	if (hdr->type != WL_MSG_REQUEST && hdr->type != WL_MSG_REPLY)
		BAD("unknown message type");
	if (rd16(msg + 6) != 0)
		BAD("reserved header flags set");
	hdr->len = rd32(msg + 8);
	if (hdr->len > WL_MAX_MSG)
		BAD("oversized");
	if (hdr->len < (hdr->type == WL_MSG_REQUEST ? WL_REQ_MIN : WL_REPLY_MIN))
		BAD("length below minimum");
	hdr->id = rd64(msg + 12);
	memcpy(hdr->trace_id, msg + 20, 16);
	memcpy(hdr->parent_span, msg + 36, 8);
	return 0;
}

int wl_chain_open(const uint8_t *chain, size_t len, struct wl_cursor *cur, const char **why)
{
	if (len < 2)
		BAD("truncated chain");
	cur->left = rd16(chain);
	if (cur->left > WL_MAX_OPS)
		BAD("too many ops");
	cur->p = chain + 2;
	cur->end = chain + len;
	return 0;
}

/* Fixed body length per op kind; FORWARD is variable (0 here). */
static const uint16_t op_body_len[] = {
	[WL_OP_COMPUTE] = 8, [WL_OP_LOAD] = 12, [WL_OP_STORE] = 12, [WL_OP_FORWARD] = 0, [WL_OP_SKIP] = 10,
};

int wl_chain_next(struct wl_cursor *cur, struct wl_op *op, const char **why)
{
	if (cur->left == 0)
		return 0;
	if (cur->end - cur->p < 4)
		BAD("truncated op header");
	op->kind = cur->p[0];
	op->flags = cur->p[1];
	uint16_t blen = rd16(cur->p + 2);
	const uint8_t *b = cur->p + 4;
	if (cur->end - b < blen)
		BAD("op body past end of chain");
	if (op->kind < WL_OP_COMPUTE || op->kind > WL_OP_SKIP)
		BAD("unknown op kind");
	if (op->kind != WL_OP_FORWARD && blen != op_body_len[op->kind])
		BAD("op body length mismatch");
	switch (op->kind) {
	case WL_OP_COMPUTE:
		if ((op->flags & ~(WL_COMPUTE_WALL | WL_COMPUTE_LOOP)) || op->flags == (WL_COMPUTE_WALL | WL_COMPUTE_LOOP))
			BAD("unknown compute flags");
		op->compute.ns = rd64(b);
		break;
	case WL_OP_LOAD:
	case WL_OP_STORE:
		op->io.offset = rd64(b);
		op->io.bytes = rd32(b + 8);
		if (op->io.bytes > WL_MAX_IO)
			BAD("io size above limit");
		if ((op->kind == WL_OP_LOAD && op->flags != 0) || op->flags > WL_SYNC_PERIODIC)
			BAD("unknown io flags");
		break;
	case WL_OP_FORWARD:
		if (blen < 8)
			BAD("truncated forward");
		op->fwd.timeout_us = rd32(b);
		op->fwd.retries = b[4];
		op->fwd.nack = b[5];
		op->fwd.ntargets = b[6];
		if (b[7] != 0 || op->flags != 0)
			BAD("reserved forward bits set");
		if (op->fwd.ntargets == 0 || op->fwd.ntargets > WL_MAX_TARGETS)
			BAD("forward target count out of range");
		if (op->fwd.nack == 0 || op->fwd.nack > op->fwd.ntargets)
			BAD("forward nack out of range");
		op->fwd.targets = b + 8;
		op->fwd.targets_len = blen - 8u;
		break;
	case WL_OP_SKIP:
		if (op->flags != 0)
			BAD("unknown skip flags");
		op->skip.threshold = rd32(b);
		op->skip.draw = rd32(b + 4);
		op->skip.count = rd16(b + 8);
		break;
	}
	cur->p = b + blen;
	cur->left--;
	return 1;
}

#define TARGET_FIXED 32 /* proto, family, port, addr[16], pad, reply, chain_len */

int wl_fwd_target(const struct wl_op *fwd, unsigned index, struct wl_target *t, const char **why)
{
	const uint8_t *p = fwd->fwd.targets, *end = p + fwd->fwd.targets_len;
	for (unsigned i = 0; i <= index; i++) {
		if (end - p < TARGET_FIXED)
			BAD("truncated forward target");
		t->proto = p[0];
		t->family = p[1];
		t->port = rd16(p + 2);
		memcpy(t->addr, p + 4, 16);
		t->pad_len = rd32(p + 20);
		t->reply_len = rd32(p + 24);
		t->chain_len = rd32(p + 28);
		t->chain = p + TARGET_FIXED;
		if ((size_t)(end - t->chain) < t->chain_len)
			BAD("forward sub-chain past end");
		p = t->chain + t->chain_len;
	}
	if (t->proto != WL_PROTO_TCP && t->proto != WL_PROTO_UDP)
		BAD("forward target protocol unknown");
	if (t->family != 4 && t->family != 6)
		BAD("forward target family unknown");
	if (t->reply_len > WL_MAX_MSG || t->pad_len > WL_MAX_MSG - WL_REQ_MIN - t->chain_len)
		BAD("forward sizes above limit");
	return 0;
}

static int validate_chain(const uint8_t *chain, size_t len, int depth, const char **why, const uint8_t **chain_end)
{
	struct wl_cursor cur;
	struct wl_op op;
	int rc;
	if (depth > WL_MAX_DEPTH)
		BAD("forward nesting too deep");
	if (wl_chain_open(chain, len, &cur, why) < 0)
		return -1;
	while ((rc = wl_chain_next(&cur, &op, why)) == 1) {
		if (op.kind != WL_OP_FORWARD)
			continue;
		struct wl_target t = {0};
		for (unsigned i = 0; i < op.fwd.ntargets; i++) {
			if (wl_fwd_target(&op, i, &t, why) < 0)
				return -1;
			const uint8_t *sub_end;
			if (validate_chain(t.chain, t.chain_len, depth + 1, why, &sub_end) < 0)
				return -1;
			if (sub_end != t.chain + t.chain_len)
				BAD("forward sub-chain has trailing bytes");
		}
		if (t.chain + t.chain_len != op.fwd.targets + op.fwd.targets_len)
			BAD("forward op has trailing bytes");
	}
	if (rc < 0)
		return -1;
	*chain_end = cur.p;
	return 0;
}

int wl_validate_request(const uint8_t *msg, size_t len, const char **why, size_t *used)
{
	struct wl_hdr hdr;
	if (wl_decode_hdr(msg, len, &hdr, why) < 0)
		return -1;
	if (hdr.type != WL_MSG_REQUEST)
		BAD("expected a request");
	if (hdr.len != len)
		BAD("length field disagrees with message size");
	uint32_t reply_len = rd32(msg + WL_HDR_LEN);
	if (reply_len > WL_MAX_MSG)
		BAD("reply size above limit");
	const uint8_t *end; /* bytes after the chain are request padding */
	if (validate_chain(msg + WL_HDR_LEN + 4, len - WL_HDR_LEN - 4, 1, why, &end) < 0)
		return -1;
	*used = (size_t)(end - msg);
	return 0;
}

int wl_request_chain(const uint8_t *msg, size_t len, uint32_t *reply_len, struct wl_cursor *cur)
{
	const char *why;
	*reply_len = rd32(msg + WL_HDR_LEN);
	return wl_chain_open(msg + WL_HDR_LEN + 4, len - WL_HDR_LEN - 4, cur, &why);
}

uint8_t wl_reply_status(const uint8_t *msg) { return msg[WL_HDR_LEN]; }

/* ---- encoding ---- */

/* Allocation failure is sticky per buffer: encoders keep going and wl_enc_ok reports it.
 * Never compacts: wl_put_hdr and friends hand out positions in the buffer
 * that wl_finish_msg patches later, and moving the data under an unfinished
 * message would patch the wrong bytes (a connection's out buffer often holds
 * unsent bytes at an offset; wl_flow_send compacts it between messages). */
static uint8_t *grow(struct wl_buf *b, size_t n)
{
	if (wl_buf_grow(b, n) < 0) {
		b->oom = true;
		return NULL;
	}
	uint8_t *p = b->data + b->len;
	b->len += n;
	return p;
}

int wl_enc_ok(const struct wl_buf *b) { return b->oom ? -1 : 0; }

void wl_put_u8(struct wl_buf *b, uint8_t v) { uint8_t *p = grow(b, 1); if (p) p[0] = v; }
void wl_put_u16(struct wl_buf *b, uint16_t v) { uint8_t *p = grow(b, 2); if (p) { p[0] = v >> 8; p[1] = (uint8_t)v; } }
void wl_put_u32(struct wl_buf *b, uint32_t v) { wl_put_u16(b, v >> 16); wl_put_u16(b, (uint16_t)v); }
void wl_put_u64(struct wl_buf *b, uint64_t v) { wl_put_u32(b, v >> 32); wl_put_u32(b, (uint32_t)v); }
void wl_put_bytes(struct wl_buf *b, const void *src, size_t n) { uint8_t *p = grow(b, n); if (p && n) memcpy(p, src, n); }
void wl_put_zeros(struct wl_buf *b, size_t n) { uint8_t *p = grow(b, n); if (p && n) memset(p, 0, n); }

void wl_patch_u16(struct wl_buf *b, size_t at, uint16_t v)
{
	if (at + 2 > b->len)
		return;
	b->data[at] = v >> 8;
	b->data[at + 1] = (uint8_t)v;
}

void wl_patch_u32(struct wl_buf *b, size_t at, uint32_t v)
{
	wl_patch_u16(b, at, v >> 16);
	wl_patch_u16(b, at + 2, (uint16_t)v);
}

size_t wl_put_hdr(struct wl_buf *b, uint8_t type, uint64_t id, const uint8_t trace_id[16],
		  const uint8_t parent_span[8])
{
	static const uint8_t zero[16];
	size_t at = b->len;
	wl_put_u32(b, WL_MAGIC);
	wl_put_u8(b, WL_VERSION);
	wl_put_u8(b, type);
	wl_put_u16(b, 0);
	wl_put_u32(b, 0); /* patched by wl_finish_msg */
	wl_put_u64(b, id);
	wl_put_bytes(b, trace_id ? trace_id : zero, 16);
	wl_put_bytes(b, parent_span ? parent_span : zero, 8);
	return at;
}

void wl_finish_msg(struct wl_buf *b, size_t hdr_at) { wl_patch_u32(b, hdr_at + 8, (uint32_t)(b->len - hdr_at)); }

void wl_put_reply(struct wl_buf *b, uint64_t id, const uint8_t trace_id[16], uint8_t status, uint32_t reply_len)
{
	size_t at = wl_put_hdr(b, WL_MSG_REPLY, id, trace_id, NULL);
	wl_put_u8(b, status);
	wl_put_zeros(b, 3);
	if (reply_len > WL_REPLY_MIN)
		wl_put_zeros(b, reply_len - WL_REPLY_MIN);
	wl_finish_msg(b, at);
}

size_t wl_put_op_begin(struct wl_buf *b, uint8_t kind, uint8_t flags)
{
	size_t at = b->len;
	wl_put_u8(b, kind);
	wl_put_u8(b, flags);
	wl_put_u16(b, 0);
	return at;
}

void wl_put_op_end(struct wl_buf *b, size_t op_at) { wl_patch_u16(b, op_at + 2, (uint16_t)(b->len - op_at - 4)); }
