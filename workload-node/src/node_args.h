/* node_args: wl-node's command line, read from its option table (opts.h)
 * and the caps' rows. node.c calls it; it calls caps.c and sched_policy.c. */
#pragma once
#include "node.h"
#include "opts.h"

/* Fill cfg from argv; with --check, print the listen addresses as JSON. */
enum wl_args_result wl_node_args(struct wl_node_cfg *cfg, int argc, char **argv);
