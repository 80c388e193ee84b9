/* libFuzzer target: the node's request decoder must reject or accept any
 * byte string without reading out of bounds, and an accepted request must
 * walk cleanly (every op and every forward target decodes again). */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

static void walk(const uint8_t *chain, size_t len, int depth)
{
	struct wl_cursor cur;
	struct wl_op op;
	const char *why;
	if (wl_chain_open(chain, len, &cur, &why) < 0)
		abort(); /* validated chains always open */
	int rc;
	while ((rc = wl_chain_next(&cur, &op, &why)) == 1) {
		if (op.kind != WL_OP_FORWARD)
			continue;
		for (unsigned i = 0; i < op.fwd.ntargets; i++) {
			struct wl_target t;
			if (wl_fwd_target(&op, i, &t, &why) < 0)
				abort();
			walk(t.chain, t.chain_len, depth + 1);
		}
	}
	if (rc < 0 || depth > WL_MAX_DEPTH)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Copy so that ASan catches any read past the exact input length. */
	uint8_t *msg = malloc(size ? size : 1);
	if (!msg)
		return 0;
	memcpy(msg, data, size);
	const char *why;
	size_t used;
	struct wl_hdr hdr;
	(void)wl_decode_hdr(msg, size, &hdr, &why);
	if (wl_validate_request(msg, size, &why, &used) == 0) {
		struct wl_cursor cur;
		uint32_t reply_len;
		if (used > size || wl_request_chain(msg, size, &reply_len, &cur) < 0)
			abort();
		walk(msg + WL_HDR_LEN + 4, used - WL_HDR_LEN - 4, 1);
	}
	free(msg);
	return 0;
}
