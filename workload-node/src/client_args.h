/* client_args: wl-client's command line, read from its option table
 * (general options here, the operations in chain_args.c). */
#pragma once
#include "client.h"
#include "opts.h"

/* Fill cl from argv; with --check, print the parsed chain as JSON (chain_json.c). */
enum wl_args_result wl_client_args(struct client *cl, int argc, char **argv);
void wl_client_check_json(FILE *out, const struct client *cl);
