/* drain: the complete messages in what a connection has read. A client's
 * requests become jobs (job.c), with a time slice per connection per loop
 * pass, so that one client's queue of long COMPUTEs does not starve the
 * others; a client connection over --max-backlog is stalled (flow.h); a
 * request over --max-request is answered ERR and skipped unread; a forward
 * target's reply goes to forward.c, its padding dropped as it arrives, and
 * the job it settles is continued. Called by reader.c; calls job.c,
 * forward.c, flow.c and spans.c. */
#pragma once
#include "conn.h"

#define WL_SLICE_NS 200000 /* time a connection's requests may take per loop pass */

/* Take the complete messages out of src (the worker's read buffer or c's
 * own buffer of an unfinished message); false if c must close. c->more
 * says its time slice ran out with requests left; c->skip counts the bytes
 * of a message still to drop as they arrive. */
bool wl_drain(struct wl_conn *c, struct wl_buf *src);
