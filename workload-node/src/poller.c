/* poller: one interface over epoll, poll and select. epoll is the default;
 * poll and select rebuild their fd arrays per wait, which is their real cost
 * and the point of measuring them (DistWalk's "poll modes"). */
#include "net.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

struct wl_pollent {
	int fd;
	uint32_t events;
	void *ptr;
};

int wl_poller_init(struct wl_poller *p, enum wl_poll_mode mode)
{
	memset(p, 0, sizeof(*p));
	p->mode = mode;
	p->epfd = -1;
	if (mode == WL_PM_EPOLL && (p->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return wl_err("epoll_create1: %s", strerror(errno));
	return 0;
}

void wl_poller_close(struct wl_poller *p)
{
	if (p->epfd >= 0 && close(p->epfd) < 0)
		wl_err("close epoll fd %d: %s", p->epfd, strerror(errno));
	free(p->ents);
	free(p->scratch);
	memset(p, 0, sizeof(*p));
	p->epfd = -1;
}

static uint32_t to_epoll(uint32_t ev)
{
	return (ev & WL_EV_IN ? EPOLLIN : 0) | (ev & WL_EV_OUT ? EPOLLOUT : 0);
}

static struct wl_pollent *find(struct wl_poller *p, int fd)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->ents[i].fd == fd)
			return &p->ents[i];
	return NULL;
}

int wl_poller_add(struct wl_poller *p, int fd, uint32_t events, void *ptr, bool exclusive)
{
	if (p->mode == WL_PM_EPOLL) {
		struct epoll_event ev = {.events = to_epoll(events) | (exclusive ? EPOLLEXCLUSIVE : 0), .data.ptr = ptr};
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			return wl_err("epoll_ctl ADD fd %d: %s", fd, strerror(errno));
		return 0;
	}
	if (p->mode == WL_PM_SELECT && fd >= FD_SETSIZE)
		return wl_err("select poll mode: fd %d is above FD_SETSIZE %d; use --pm epoll", fd, FD_SETSIZE);
	if (wl_grow(&p->ents, &p->cap, p->n, sizeof(*p->ents), 64) < 0)
		return wl_err("poller: out of memory for %zu fds", p->n + 1);
	p->ents[p->n++] = (struct wl_pollent){fd, events, ptr};
	return 0;
}

int wl_poller_mod(struct wl_poller *p, int fd, uint32_t events, void *ptr)
{
	if (p->mode == WL_PM_EPOLL) {
		struct epoll_event ev = {.events = to_epoll(events), .data.ptr = ptr};
		if (epoll_ctl(p->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
			return wl_err("epoll_ctl MOD fd %d: %s", fd, strerror(errno));
		return 0;
	}
	struct wl_pollent *e = find(p, fd);
	if (!e)
		return wl_err("poller: fd %d is not registered", fd);
	e->events = events;
	e->ptr = ptr;
	return 0;
}

int wl_poller_del(struct wl_poller *p, int fd)
{
	if (p->mode == WL_PM_EPOLL) {
		if (epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL) < 0)
			return wl_err("epoll_ctl DEL fd %d: %s", fd, strerror(errno));
		return 0;
	}
	struct wl_pollent *e = find(p, fd);
	if (!e)
		return wl_err("poller: fd %d is not registered", fd);
	*e = p->ents[--p->n];
	return 0;
}

static int scratch(struct wl_poller *p, size_t bytes)
{
	if (bytes <= p->scratch_cap)
		return 0;
	void *s = realloc(p->scratch, bytes);
	if (!s)
		return wl_err("poller: out of memory (%zu bytes)", bytes);
	p->scratch = s;
	p->scratch_cap = bytes;
	return 0;
}

static int wait_epoll(struct wl_poller *p, struct wl_event *evs, int max, int timeout_ms)
{
	if (scratch(p, (size_t)max * sizeof(struct epoll_event)) < 0)
		return -1;
	struct epoll_event *ee = p->scratch;
	int n = epoll_wait(p->epfd, ee, max, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : wl_err("epoll_wait: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		uint32_t e = ee[i].events;
		evs[i].ptr = ee[i].data.ptr;
		evs[i].events = (e & EPOLLIN ? WL_EV_IN : 0) | (e & EPOLLOUT ? WL_EV_OUT : 0) |
				(e & (EPOLLERR | EPOLLHUP) ? WL_EV_ERR : 0);
	}
	return n;
}

static int wait_poll(struct wl_poller *p, struct wl_event *evs, int max, int timeout_ms)
{
	if (scratch(p, (p->n + 1) * sizeof(struct pollfd)) < 0)
		return -1;
	struct pollfd *pf = p->scratch;
	for (size_t i = 0; i < p->n; i++)
		pf[i] = (struct pollfd){.fd = p->ents[i].fd,
					.events = (short)((p->ents[i].events & WL_EV_IN ? POLLIN : 0) |
							  (p->ents[i].events & WL_EV_OUT ? POLLOUT : 0))};
	int rc = poll(pf, p->n, timeout_ms);
	if (rc < 0)
		return errno == EINTR ? 0 : wl_err("poll: %s", strerror(errno));
	int n = 0;
	for (size_t i = 0; i < p->n && n < max; i++) {
		short r = pf[i].revents;
		if (!r)
			continue;
		evs[n].ptr = p->ents[i].ptr;
		evs[n++].events = (r & POLLIN ? WL_EV_IN : 0) | (r & POLLOUT ? WL_EV_OUT : 0) |
				  (r & (POLLERR | POLLHUP | POLLNVAL) ? WL_EV_ERR : 0);
	}
	return n;
}

static int wait_select(struct wl_poller *p, struct wl_event *evs, int max, int timeout_ms)
{
	fd_set rd, wr;
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	int maxfd = -1;
	for (size_t i = 0; i < p->n; i++) {
		int fd = p->ents[i].fd;
		if (p->ents[i].events & WL_EV_IN)
			FD_SET(fd, &rd);
		if (p->ents[i].events & WL_EV_OUT)
			FD_SET(fd, &wr);
		if (fd > maxfd)
			maxfd = fd;
	}
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000}, *tvp = timeout_ms < 0 ? NULL : &tv;
	int rc = select(maxfd + 1, &rd, &wr, NULL, tvp);
	if (rc < 0)
		return errno == EINTR ? 0 : wl_err("select: %s", strerror(errno));
	int n = 0;
	for (size_t i = 0; i < p->n && n < max; i++) {
		int fd = p->ents[i].fd;
		uint32_t e = (FD_ISSET(fd, &rd) ? WL_EV_IN : 0) | (FD_ISSET(fd, &wr) ? WL_EV_OUT : 0);
		if (e)
			evs[n++] = (struct wl_event){p->ents[i].ptr, e};
	}
	return n;
}

int wl_poller_wait(struct wl_poller *p, struct wl_event *evs, int max, int timeout_ms)
{
	switch (p->mode) {
	case WL_PM_EPOLL: return wait_epoll(p, evs, max, timeout_ms);
	case WL_PM_POLL: return wait_poll(p, evs, max, timeout_ms);
	case WL_PM_SELECT: return wait_select(p, evs, max, timeout_ms);
	}
	return -1;
}
