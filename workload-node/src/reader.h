/* reader: what a worker reads off its sockets. A stream read lands in the
 * worker's read buffer and its messages are drained (drain.h) from there;
 * only an unfinished message is copied into its connection's own buffer. A
 * datagram is one request. Called by the loop (worker.c); calls drain.c,
 * job.c (a datagram's request), flow.c and conn.c. */
#pragma once
#include "conn.h"

void wl_reader_stream(struct wl_conn *c, uint32_t events); /* a client or outbound connection's events */
void wl_reader_udp(struct wl_conn *c);                     /* the datagrams waiting on a UDP socket */
void wl_reader_backlog(struct wl_worker *w); /* continue connections whose requests were left for this pass */
