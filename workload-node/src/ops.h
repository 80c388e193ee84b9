/* ops: the client's operation chain as templates (values not yet drawn),
 * built from the command line in order (chain_args.c), and encoded into one
 * concrete request per send (every value drawn then, from the sender's PRNG). */
#pragma once
#include "dist.h"
#include "net.h"
#include "wire.h"

struct wl_chain_tmpl;

struct wl_op_tmpl {
	uint8_t kind, flags;
	struct wl_value amount; /* COMPUTE time (us), LOAD/STORE bytes, SKIP probability */
	struct wl_value offset; /* LOAD/STORE */
	bool has_offset;
	uint16_t skip_count;
	uint32_t skip_every; /* SKIP: only on every n-th request of a pair (request index % n == 0) */
	/* FORWARD */
	uint32_t timeout_us;
	uint8_t retries, nack, ntargets;
	bool branch;
	int cur_branch;
	struct wl_addr targets[WL_MAX_TARGETS];
	struct wl_chain_tmpl *sub[WL_MAX_TARGETS];
	struct wl_value req_size, reply_size; /* of the forwarded request and its reply */
};

struct wl_chain_tmpl {
	struct wl_op_tmpl **ops;
	int n;
	size_t cap;
	struct wl_op_tmpl *owner; /* the FORWARD whose sub-chain this is; NULL at the top */
};

struct wl_workload {
	struct wl_chain_tmpl root, *cur;
	struct wl_value req_size, reply_size; /* top level: client request and node reply sizes */
	struct wl_value load_offset, store_offset;
	bool has_load_offset, has_store_offset;
};

void wl_workload_init(struct wl_workload *wk);
/* The chain is built from the command line by chain_args.c. */
/* A request id is the pair's index << 40 | the request's index within the pair. */
#define WL_SEQ_MASK 0xffffffffffull
/* Encode one request; returns 0 or -1 (e.g. a forward op above its 64 KiB encoding limit). */
int wl_workload_encode(struct wl_workload *wk, struct wl_buf *b, uint64_t id, const uint8_t trace_id[16],
		       const uint8_t parent_span[8], struct wl_rng *rng);
