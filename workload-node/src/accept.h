/* accept: the node's listening sockets, per accept mode (-a): child, a
 * SO_REUSEPORT socket per worker and address, so the kernel spreads the
 * connections; shared, one socket per address that every worker accepts
 * on; parent, one socket per address whose TCP connections one acceptor
 * thread deals out to the workers in turn, through their inboxes. UDP
 * sockets are the workers' own in every mode. Port 0 is any free port,
 * the same one for every socket of the address. node.c calls it; it calls
 * conn.c (the listening connections, --max-conns) and inbox.c. */
#pragma once
#include "node.h"

int wl_accept_open(struct wl_node *node); /* the sockets shared by the workers (shared and parent modes) */
int wl_accept_attach(struct wl_node *node, struct wl_worker *w); /* w's listening and UDP sockets */
int wl_accept_start(struct wl_node *node, pthread_t *thread);    /* parent mode: the acceptor thread */
void wl_accept_announce(const struct wl_node *node); /* "wl-node: listening on ..." per address, on stderr */
