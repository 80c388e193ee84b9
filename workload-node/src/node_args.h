/* node_args: wl-node's command line, read from its option table. */
#pragma once
#include "node.h"
#include "opts.h"

/* Fill cfg from argv; with --check, print the listen addresses as JSON. */
enum wl_args_result wl_node_args(struct wl_node_cfg *cfg, int argc, char **argv);
