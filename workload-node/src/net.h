/* net: addresses ("[tcp://|udp://]host[:port]"), sockets, and a small poller
 * with epoll, poll and select back ends (the node's --pm). */
#pragma once
#include "util.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define WL_DEFAULT_PORT 7891

struct wl_addr {
	int proto; /* enum wl_proto */
	struct sockaddr_storage sa;
	socklen_t salen;
	char text[160]; /* as given, for messages */
	char host[64];  /* the host part as written ("" for the default, localhost) */
	bool unresolved; /* --check: a name left unresolved; sa holds only the port */
};

/* Map a host name to "addr[:port]" before DNS (client --resolve name=addr:port). */
int wl_resolve_add(const char *mapping);
/* --check: parse addresses but send no name to DNS. */
void wl_addr_offline(bool on);
/* --names NAME[:PORT],...: the host names a target may have (besides IP
 * literals and --resolve names); any other is "unknown target". An empty
 * list knows no name. */
int wl_addr_known_names(const char *list);
/* "[tcp://|udp://|tcp:|udp:]host[:port]": a host a request is sent to (--to, -F). */
int wl_addr_parse(const char *spec, struct wl_addr *out, const char *what);
/* The same syntax for an address of this host (-b), with its own default port; --names does not apply. */
int wl_addr_parse_local(const char *spec, struct wl_addr *out, const char *what, uint16_t default_port);
uint16_t wl_addr_port(const struct wl_addr *a);
int wl_addr_family(const struct wl_addr *a);            /* 4 or 6 */
void wl_addr_raw(const struct wl_addr *a, uint8_t out[16]); /* v4 in the first 4 bytes */
void wl_addr_from_raw(struct wl_addr *a, int proto, int family, const uint8_t raw[16], uint16_t port);

int wl_set_nonblock(int fd);
int wl_set_nodelay(int fd);
int wl_listen(const struct wl_addr *a, int backlog, bool reuseport); /* TCP listen or UDP bind */
int wl_connect(const struct wl_addr *a, bool nonblock, bool nodelay);
/* The same from a local address (wl-client -b), or from any when local is NULL. */
int wl_connect_from(const struct wl_addr *a, const struct wl_addr *local, bool nonblock, bool nodelay);

enum wl_poll_mode { WL_PM_EPOLL, WL_PM_POLL, WL_PM_SELECT };
#define WL_EV_IN 1u
#define WL_EV_OUT 2u
#define WL_EV_ERR 4u

struct wl_event {
	void *ptr;
	uint32_t events;
};

struct wl_poller {
	enum wl_poll_mode mode;
	int epfd;
	struct wl_pollent *ents; /* poll/select: the registered fds */
	size_t n, cap;
	void *scratch; /* epoll_event[] or pollfd[] sized for wait */
	size_t scratch_cap;
};

int wl_poller_init(struct wl_poller *p, enum wl_poll_mode mode);
void wl_poller_close(struct wl_poller *p);
int wl_poller_add(struct wl_poller *p, int fd, uint32_t events, void *ptr, bool exclusive);
int wl_poller_mod(struct wl_poller *p, int fd, uint32_t events, void *ptr);
int wl_poller_del(struct wl_poller *p, int fd);
int wl_poller_wait(struct wl_poller *p, struct wl_event *evs, int max, int timeout_ms);
