/* connect: a session's connection to the first node, as DistWalk's options
 * ask for it: from -b's address, tried again --retry-num times
 * --retry-period apart when refused, without blocking if --non-block (the
 * thread spins until the connection is up), and timed for --conn-times. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLEEP_SLICE_NS 20000000 /* a waiting thread still notices Ctrl-C */

static bool stopped(const struct client *cl) { return __atomic_load_n(&cl->stop, __ATOMIC_RELAXED); }

static void pause_ns(const struct client *cl, uint64_t ns)
{
	for (uint64_t end = wl_now_ns() + ns, now; !stopped(cl) && (now = wl_now_ns()) < end;)
		wl_sleep_until(end - now > SLEEP_SLICE_NS ? now + SLEEP_SLICE_NS : end, false);
}

/* --non-block: spin until the connection is established (or refused), then block as usual. */
static int spin_until_connected(const struct client *cl, int fd)
{
	uint64_t deadline = wl_now_ns() + cl->timeout_ns;
	struct pollfd pf = {.fd = fd, .events = POLLOUT};
	int ready;
	while ((ready = poll(&pf, 1, 0)) == 0 && wl_now_ns() < deadline && !stopped(cl))
		;
	if (ready < 0)
		return wl_err("connect %s: poll: %s", cl->to.text, strerror(errno));
	if (ready == 0)
		return wl_err("connect %s: not connected within --timeout", cl->to.text);
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return wl_err("connect %s: getsockopt SO_ERROR: %s", cl->to.text, strerror(errno));
	if (err)
		return wl_err("connect %s: %s", cl->to.text, strerror(err));
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return wl_err("connect %s: fcntl: %s", cl->to.text, strerror(errno));
	return 0;
}

int wl_session_connect(struct pair *p, uint32_t session)
{
	const struct client *cl = p->cl;
	const struct wl_addr *local = cl->has_bind ? &cl->bind_addr : NULL;
	bool nonblock = cl->nonblock && cl->to.proto == WL_PROTO_TCP; /* UDP connects at once */
	uint64_t t0 = wl_now_ns();
	int fd = -1;
	for (uint32_t attempt = 0; attempt <= cl->retry_num && fd < 0 && !stopped(cl); attempt++) {
		if (attempt)
			pause_ns(cl, cl->retry_period_ns);
		fd = wl_connect_from(&cl->to, local, nonblock, cl->nodelay);
		if (fd >= 0 && nonblock && spin_until_connected(cl, fd) < 0) {
			close(fd);
			fd = -1;
		}
	}
	if (p->conn_ns)
		p->conn_ns[session] = wl_now_ns() - t0;
	return fd;
}
