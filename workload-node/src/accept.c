/* accept: the node's listening sockets and the acceptor thread (see accept.h). */
#include "accept.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Port 0 means "any free port": bind once, then reuse the chosen port for the
 * other sockets of the same address (child mode binds one per worker). */
static int open_socket(struct wl_addr *a, int backlog, bool reuseport)
{
	int fd = wl_listen(a, backlog, reuseport);
	if (fd >= 0 && wl_addr_port(a) == 0) {
		a->salen = sizeof(a->sa);
		if (getsockname(fd, (struct sockaddr *)&a->sa, &a->salen) < 0) {
			close(fd);
			return wl_err("getsockname on %s: %s", a->text, strerror(errno));
		}
	}
	return fd;
}

int wl_accept_open(struct wl_node *node)
{
	for (int b = 0; b < node->cfg.nbinds; b++) {
		node->listen_fds[b] = -1;
		if (node->cfg.accept_mode == WL_AM_CHILD)
			continue;
		if ((node->listen_fds[b] = open_socket(&node->cfg.binds[b], node->cfg.backlog, false)) < 0)
			return -1;
	}
	return 0;
}

int wl_accept_attach(struct wl_node *node, struct wl_worker *w)
{
	for (int b = 0; b < node->cfg.nbinds; b++) {
		struct wl_addr *a = &node->cfg.binds[b];
		bool udp = a->proto == WL_PROTO_UDP;
		int fd;
		if (node->cfg.accept_mode == WL_AM_CHILD) {
			if ((fd = open_socket(a, node->cfg.backlog, true)) < 0)
				return -1;
		} else if (node->cfg.accept_mode == WL_AM_PARENT && !udp) {
			continue; /* the acceptor thread owns TCP listeners */
		} else {
			fd = node->listen_fds[b];
		}
		if (!wl_conn_new(w, udp ? WL_CONN_UDP : WL_CONN_LISTEN, fd, WL_EV_IN))
			return -1;
	}
	return 0;
}

/* Parent mode: accept every TCP connection and deal them out round-robin. */
static void *acceptor_thread(void *arg)
{
	struct wl_node *node = arg;
	struct pollfd pf[WL_MAX_BINDS];
	int n = 0, next = 0;
	for (int b = 0; b < node->cfg.nbinds; b++)
		if (node->cfg.binds[b].proto == WL_PROTO_TCP)
			pf[n++] = (struct pollfd){.fd = node->listen_fds[b], .events = POLLIN};
	while (!__atomic_load_n(&node->stop, __ATOMIC_RELAXED)) {
		if (poll(pf, (nfds_t)n, 100) < 0 && errno != EINTR) {
			wl_err("acceptor: poll: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			if (!(pf[i].revents & POLLIN))
				continue;
			int fd = accept4(pf[i].fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				continue;
			struct wl_worker *w = &node->workers[next++ % node->cfg.nthreads];
			if (!wl_conn_admit(w)) {
				close(fd); /* over --max-conns */
				continue;
			}
			if (node->cfg.nodelay && wl_set_nodelay(fd) < 0) {
				wl_conn_unadmit(node);
				close(fd);
				continue;
			}
			if (wl_inbox_post_fd(&w->inbox, fd) < 0) {
				wl_conn_unadmit(node);
				close(fd);
				continue;
			}
			if (wl_inbox_wake(&w->inbox) < 0)
				wl_err("acceptor: wake worker %d: %s", w->index, strerror(errno));
		}
	}
	return NULL;
}

int wl_accept_start(struct wl_node *node, pthread_t *thread)
{
	if (pthread_create(thread, NULL, acceptor_thread, node) != 0)
		return wl_err("pthread_create acceptor failed");
	return 0;
}

void wl_accept_announce(const struct wl_node *node)
{
	static const char *const am[] = {"child", "shared", "parent"};
	for (int b = 0; b < node->cfg.nbinds; b++) {
		const struct wl_addr *a = &node->cfg.binds[b];
		char host[64] = "?";
		const void *raw = a->sa.ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)&a->sa)->sin6_addr
							      : (const void *)&((const struct sockaddr_in *)&a->sa)->sin_addr;
		inet_ntop(a->sa.ss_family, raw, host, sizeof(host));
		fprintf(stderr, "wl-node: listening on %s://%s:%u (%d workers, accept mode %s)\n",
			a->proto == WL_PROTO_UDP ? "udp" : "tcp", host, wl_addr_port(a), node->cfg.nthreads,
			am[node->cfg.accept_mode]);
	}
}
