/* conn: a worker's connections: admission (--max-conns), slots with
 * generations, registration in the poller, deferred close, the backlog of
 * connections with requests left for the next pass (see conn.h). */
#include "conn.h"
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Keep per-connection memory small between requests: an idle connection
 * holds no buffers, and a buffer grown for one big message is released. */
void wl_conn_trim(struct wl_conn *c)
{
	struct wl_buf *b = &c->in;
	if (wl_buf_avail(b) == 0 && b->cap > WL_READ_CHUNK)
		wl_buf_free(b);
	else if (wl_buf_avail(b) == 0)
		b->off = b->len = 0;
}

/* A client connection over --max-conns is refused (the caller closes it):
 * a flood of connections meets a counted cap, not EMFILE. */
bool wl_conn_admit(struct wl_worker *w)
{
	struct wl_node *node = w->node;
	if ((uint64_t)__atomic_add_fetch(&node->nconns, 1, __ATOMIC_RELAXED) <= node->cfg.max_conns)
		return true;
	__atomic_fetch_sub(&node->nconns, 1, __ATOMIC_RELAXED);
	WL_COUNT(w, over_conns, 1);
	return false;
}

void wl_conn_unadmit(struct wl_node *node) { __atomic_fetch_sub(&node->nconns, 1, __ATOMIC_RELAXED); }

static struct wl_conn *conn_alloc(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events)
{
	struct wl_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		wl_err("worker %d: out of memory for a connection", w->index);
		return NULL;
	}
	c->kind = kind;
	c->fd = fd;
	c->w = w;
	c->events = events;
	struct wl_conns *t = &w->conns;
	if (t->nfree) {
		c->slot = t->free_slots[--t->nfree];
	} else {
		/* two arrays of one capacity: t->cap moves once both have grown */
		size_t slots_cap = t->cap, free_cap = t->cap;
		if (wl_grow(&t->slots, &slots_cap, t->n, sizeof(*t->slots), 64) < 0 ||
		    wl_grow(&t->free_slots, &free_cap, t->n, sizeof(*t->free_slots), 64) < 0) {
			wl_err("worker %d: out of memory for %u connections", w->index, t->n + 1);
			free(c);
			return NULL;
		}
		t->cap = slots_cap;
		c->slot = t->n++;
	}
	c->gen = ++w->gen;
	t->slots[c->slot] = c;
	if (wl_poller_add(&w->poller, fd, events, c, kind == WL_CONN_LISTEN || kind == WL_CONN_UDP) < 0) {
		t->slots[c->slot] = NULL;
		t->free_slots[t->nfree++] = c->slot;
		free(c);
		return NULL;
	}
	return c;
}

struct wl_conn *wl_conn_new(struct wl_worker *w, enum wl_conn_kind kind, int fd, uint32_t events)
{
	struct wl_conn *c = conn_alloc(w, kind, fd, events);
	if (!c && kind == WL_CONN_IN)
		wl_conn_unadmit(w->node);
	/* Tracing: a serve starts, and a forward.send's reply is timed, at the
	 * kernel's receive (rxstamp.h); refused, at the read. */
	if (c && w->trace && kind != WL_CONN_LISTEN)
		wl_rxstamp_enable(fd);
	return c;
}

/* Closing is deferred to the end of the loop pass: later events of the same
 * pass may still point at this connection. */
void wl_conn_kill(struct wl_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	struct wl_worker *w = c->w;
	if (wl_poller_del(&w->poller, c->fd) < 0)
		wl_err("worker %d: dropping fd %d from the poller failed", w->index, c->fd);
	if (close(c->fd) < 0)
		wl_err("worker %d: close fd %d: %s", w->index, c->fd, strerror(errno));
	struct wl_conns *t = &w->conns;
	t->slots[c->slot] = NULL;
	t->free_slots[t->nfree++] = c->slot;
	for (size_t i = 0; c->backlogged && i < t->nbacklog; i++) {
		if (t->backlog[i] == c) { /* it is freed at the end of this pass */
			memmove(t->backlog + i, t->backlog + i + 1, (t->nbacklog - i - 1) * sizeof(*t->backlog));
			t->nbacklog--;
			c->backlogged = false;
		}
	}
	if (c->kind == WL_CONN_IN) {
		WL_COUNT(w, closed, 1);
		wl_conn_unadmit(w->node);
	}
	c->next_dead = t->dead;
	t->dead = c;
}

void wl_conn_reap(struct wl_worker *w)
{
	while (w->conns.dead) {
		struct wl_conn *c = w->conns.dead;
		w->conns.dead = c->next_dead;
		wl_buf_free(&c->in);
		wl_outq_free(&c->out);
		free(c);
	}
}

struct wl_conn *wl_conn_at(struct wl_worker *w, uint32_t slot, uint32_t gen)
{
	struct wl_conn *c = slot < w->conns.n ? w->conns.slots[slot] : NULL;
	return c && c->gen == gen && !c->dead ? c : NULL;
}

void wl_conn_backlog_add(struct wl_conn *c)
{
	struct wl_conns *t = &c->w->conns;
	if (c->backlogged)
		return;
	if (wl_grow(&t->backlog, &t->backlog_cap, t->nbacklog, sizeof(*t->backlog), 16) < 0) {
		wl_err("worker %d: out of memory for the backlog", c->w->index);
		wl_conn_kill(c);
		return;
	}
	t->backlog[t->nbacklog++] = c;
	c->backlogged = true;
}

size_t wl_conn_backlog_take(struct wl_worker *w, struct wl_conn **batch, size_t max)
{
	struct wl_conns *t = &w->conns;
	size_t n = t->nbacklog < max ? t->nbacklog : max;
	memcpy(batch, t->backlog, n * sizeof(*batch));
	memmove(t->backlog, t->backlog + n, (t->nbacklog - n) * sizeof(*batch));
	t->nbacklog -= n;
	return n;
}
