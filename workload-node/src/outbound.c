/* outbound: the cache of outbound connections (see outbound.h). */
#include "outbound.h"
#include "worker.h"

#include <string.h>
#include <unistd.h>

void wl_out_note_idle(struct wl_worker *w, const struct wl_conn *c)
{
	uint64_t at = c->last_used_ns + w->node->cfg.fwd_idle_ns;
	if (at < w->outs.idle_check_ns) /* make sure the idle sweep looks at it in time */
		w->outs.idle_check_ns = at;
}

/* Connection i leaves the cache; the last one takes its place. */
static void drop(struct wl_worker *w, size_t i) { w->outs.conns[i] = w->outs.conns[--w->outs.n]; }

/* Close connection i (idle, or making room for another): it has no forward pending. */
static void close_conn(struct wl_worker *w, size_t i)
{
	WL_COUNT(w, fwd_closed, 1);
	wl_conn_kill(w->outs.conns[i]);
	drop(w, i);
}

void wl_out_forget_closed(struct wl_worker *w)
{
	if (!w->conns.dead)
		return; /* nothing was closed during this loop pass */
	for (size_t i = 0; i < w->outs.n;) {
		if (w->outs.conns[i]->dead)
			drop(w, i); /* moves the last one into slot i */
		else
			i++;
	}
}

/* Make room for one more: close the least recently used connection that
 * has no forward pending; false if every one is busy. */
static bool evict_idle(struct wl_worker *w)
{
	struct wl_outs *o = &w->outs;
	size_t lru = o->n;
	for (size_t i = 0; i < o->n; i++)
		if (o->conns[i]->npend == 0 && (lru == o->n || o->conns[i]->last_used_ns < o->conns[lru]->last_used_ns))
			lru = i;
	if (lru == o->n)
		return false;
	close_conn(w, lru);
	return true;
}

static struct wl_conn *open_conn(struct wl_worker *w, const struct wl_addr *a)
{
	int fd = wl_connect(a, true, w->node->cfg.nodelay);
	if (fd < 0)
		return NULL;
	struct wl_conn *c = wl_conn_new(w, WL_CONN_OUT, fd, WL_EV_IN | WL_EV_OUT);
	if (!c) {
		close(fd);
		return NULL;
	}
	c->peer = *a;
	c->connecting = a->proto == WL_PROTO_TCP;
	c->want_out = true;
	c->last_used_ns = wl_now_ns();
	return c;
}

struct wl_conn *wl_out_get(struct wl_worker *w, const struct wl_target *t)
{
	struct wl_outs *o = &w->outs;
	struct wl_addr a;
	wl_out_forget_closed(w); /* a connection closed in this pass is not reused */
	wl_addr_from_raw(&a, t->proto, t->family, t->addr, t->port);
	for (size_t i = 0; i < o->n; i++) {
		struct wl_conn *c = o->conns[i];
		if (c->peer.proto == a.proto && c->peer.salen == a.salen && !memcmp(&c->peer.sa, &a.sa, a.salen))
			return c;
	}
	if (o->n >= w->node->cfg.max_fwd_conns && !evict_idle(w)) {
		WL_COUNT(w, over_fwd_conns, 1);
		return NULL;
	}
	if (wl_grow(&o->conns, &o->cap, o->n, sizeof(*o->conns), 8) < 0) {
		wl_err("worker %d: out of memory for outbound connections", w->index);
		return NULL;
	}
	struct wl_conn *c = open_conn(w, &a);
	if (!c)
		return NULL;
	o->conns[o->n++] = c;
	wl_out_note_idle(w, c);
	return c;
}

uint64_t wl_out_next_idle(const struct wl_worker *w)
{
	uint64_t first = UINT64_MAX;
	for (size_t i = 0; i < w->outs.n; i++) {
		const struct wl_conn *c = w->outs.conns[i];
		if (c->npend == 0 && c->last_used_ns + w->node->cfg.fwd_idle_ns < first)
			first = c->last_used_ns + w->node->cfg.fwd_idle_ns;
	}
	return first;
}

void wl_out_close_idle(struct wl_worker *w, uint64_t now_ns)
{
	if (now_ns < w->outs.idle_check_ns)
		return;
	wl_out_forget_closed(w);
	for (size_t i = 0; i < w->outs.n;) {
		struct wl_conn *c = w->outs.conns[i];
		if (c->npend == 0 && c->last_used_ns + w->node->cfg.fwd_idle_ns <= now_ns)
			close_conn(w, i); /* moves the last one into slot i */
		else
			i++;
	}
	w->outs.idle_check_ns = wl_out_next_idle(w);
}
