/* caps: what one request, one connection or all peers together may make a
 * node hold or do, every one a flag with a default (caps.c says why).
 * node_args.c reads the flags, node.c sizes the descriptor limit, job.c
 * checks each request on receipt. Calls nothing of wl-node's. */
#pragma once
#include "node.h"
#include "opts.h"

#include <stdio.h>

enum wl_cap { WL_CAP_NONE, WL_CAP_REPLY, WL_CAP_REQUEST, WL_CAP_COMPUTE }; /* what a request exceeds */

void wl_caps_defaults(struct wl_node_cfg *cfg);
/* The caps' option rows into rows (up to max, WL_OPT_END included), for a
 * parser whose settings are a struct wl_node_cfg; how many. They are not
 * in --help's list of options: wl_caps_usage lists them, with defaults. */
size_t wl_caps_rows(struct wl_opt *rows, size_t max);
void wl_caps_usage(FILE *out);
int wl_caps_fd_budget(struct wl_node_cfg *cfg); /* raise RLIMIT_NOFILE for --max-conns and friends */
/* What a valid request asks beyond this node's caps (WL_CAP_NONE: nothing); used is
 * the length of its header and chain (wl_validate_request). */
enum wl_cap wl_caps_check(const struct wl_node_cfg *cfg, const uint8_t *msg, size_t used);
