/* wire: the versioned, explicitly encoded request/reply format (big-endian).
 * Layout is documented in ../README.md ("Wire format"); the decoder trusts
 * nothing: every length is checked before it is used. */
#pragma once
#include "util.h"

#define WL_MAGIC 0x434C5352u /* "CLSR" */
#define WL_VERSION 1
#define WL_HDR_LEN 44
#define WL_REQ_MIN (WL_HDR_LEN + 4 + 2) /* header, reply_len, nops */
#define WL_REPLY_MIN (WL_HDR_LEN + 4)   /* header, status + 3 reserved */
#define WL_MAX_MSG (256u << 20)         /* a bigger message is "oversized" */
#define WL_MAX_OPS 256                  /* per chain */
#define WL_MAX_DEPTH 8                  /* forward nesting */
#define WL_MAX_TARGETS 16
#define WL_MAX_IO (64u << 20)

enum wl_msg_type { WL_MSG_REQUEST = 1, WL_MSG_REPLY = 2 };
enum wl_op_kind { WL_OP_COMPUTE = 1, WL_OP_LOAD, WL_OP_STORE, WL_OP_FORWARD, WL_OP_SKIP };
enum wl_status { WL_ST_OK = 0, WL_ST_TIMEOUT = 1, WL_ST_ERR = 2 };
enum wl_sync { WL_SYNC_NONE = 0, WL_SYNC_EACH = 1, WL_SYNC_PERIODIC = 2 };
enum wl_proto { WL_PROTO_TCP = 1, WL_PROTO_UDP = 2 };
#define WL_COMPUTE_WALL 0x01 /* op flag: busy-wait wall time instead of thread CPU time */
#define WL_COMPUTE_LOOP 0x02 /* op flag: run a loop calibrated at node start-up */

struct wl_hdr {
	uint8_t type;
	uint32_t len; /* whole message, header included */
	uint64_t id;
	uint8_t trace_id[16];
	uint8_t parent_span[8];
};

struct wl_target {
	uint8_t proto, family; /* family 4 or 6 */
	uint16_t port;
	uint8_t addr[16];
	uint32_t pad_len, reply_len;
	const uint8_t *chain; /* encoded sub-chain: u16 nops + ops */
	uint32_t chain_len;
};

struct wl_op {
	uint8_t kind, flags;
	union {
		struct { uint64_t ns; } compute;
		struct { uint64_t offset; uint32_t bytes; } io; /* flags: enum wl_sync for STORE */
		struct {
			uint32_t timeout_us;
			uint8_t retries, nack, ntargets;
			const uint8_t *targets;
			uint32_t targets_len;
		} fwd;
		struct { uint32_t threshold, draw; uint16_t count; } skip;
	};
};

struct wl_cursor {
	const uint8_t *p, *end;
	uint32_t left; /* ops still to read */
};

/* Decoding. All return 0 on success, -1 on a malformed input with *why set
 * to a static reason (the node counts these, the fuzzer drives them). */
int wl_decode_hdr(const uint8_t *msg, size_t n, struct wl_hdr *hdr, const char **why);
/* On success *used is the length of header + reply_len + chain: what follows is padding. */
int wl_validate_request(const uint8_t *msg, size_t len, const char **why, size_t *used);
int wl_request_chain(const uint8_t *msg, size_t len, uint32_t *reply_len, struct wl_cursor *cur);
int wl_chain_open(const uint8_t *chain, size_t len, struct wl_cursor *cur, const char **why);
int wl_chain_next(struct wl_cursor *cur, struct wl_op *op, const char **why); /* 1 op, 0 end, -1 bad */
int wl_fwd_target(const struct wl_op *fwd, unsigned index, struct wl_target *target, const char **why);
uint8_t wl_reply_status(const uint8_t *msg);

/* Encoding into a growable buffer. *_begin returns the offset to patch later. */
void wl_put_u8(struct wl_buf *b, uint8_t v);
void wl_put_u16(struct wl_buf *b, uint16_t v);
void wl_put_u32(struct wl_buf *b, uint32_t v);
void wl_put_u64(struct wl_buf *b, uint64_t v);
void wl_put_bytes(struct wl_buf *b, const void *src, size_t n);
void wl_put_zeros(struct wl_buf *b, size_t n);
void wl_patch_u16(struct wl_buf *b, size_t at, uint16_t v);
void wl_patch_u32(struct wl_buf *b, size_t at, uint32_t v);
int wl_enc_ok(const struct wl_buf *b); /* 0 unless an allocation failed */

size_t wl_put_hdr(struct wl_buf *b, uint8_t type, uint64_t id, const uint8_t trace_id[16],
		  const uint8_t parent_span[8]);
void wl_finish_msg(struct wl_buf *b, size_t hdr_at); /* patches the total length */
void wl_put_reply(struct wl_buf *b, uint64_t id, const uint8_t trace_id[16], uint8_t status,
		  uint32_t reply_len);
size_t wl_put_op_begin(struct wl_buf *b, uint8_t kind, uint8_t flags);
void wl_put_op_end(struct wl_buf *b, size_t op_at);
