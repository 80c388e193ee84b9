/* net: address parsing and resolution, socket setup, poller back ends. */
#include "net.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#define MAX_RESOLVE 64
static struct { char name[64]; char target[96]; } resolve_map[MAX_RESOLVE];
static int resolve_n;

int wl_resolve_add(const char *mapping)
{
	const char *eq = strchr(mapping, '=');
	if (!eq || eq == mapping || (size_t)(eq - mapping) >= sizeof(resolve_map[0].name) ||
	    strlen(eq + 1) >= sizeof(resolve_map[0].target) || !eq[1])
		return wl_err("--resolve '%s': expected name=addr[:port]", mapping);
	if (resolve_n == MAX_RESOLVE)
		return wl_err("--resolve: more than %d mappings", MAX_RESOLVE);
	snprintf(resolve_map[resolve_n].name, sizeof(resolve_map[0].name), "%.*s", (int)(eq - mapping), mapping);
	strcpy(resolve_map[resolve_n].target, eq + 1);
	resolve_n++;
	return 0;
}

static int split_host_port(char *hp, char **host, char **port)
{
	*port = NULL;
	if (hp[0] == '[') { /* [v6]:port */
		char *close = strchr(hp, ']');
		if (!close)
			return -1;
		*close = '\0';
		*host = hp + 1;
		if (close[1] == ':')
			*port = close + 2;
		else if (close[1])
			return -1;
		return 0;
	}
	*host = hp;
	char *colon = strchr(hp, ':');
	if (colon && !strchr(colon + 1, ':')) {
		*colon = '\0';
		*port = colon + 1;
	}
	return 0;
}

int wl_addr_parse(const char *spec, struct wl_addr *out, const char *what)
{
	char buf[160], *host, *port;
	const char *rest = spec;
	memset(out, 0, sizeof(*out));
	snprintf(out->text, sizeof(out->text), "%s", spec);
	out->proto = WL_PROTO_TCP;
	if (!strncmp(rest, "tcp://", 6)) {
		rest += 6;
	} else if (!strncmp(rest, "udp://", 6)) {
		out->proto = WL_PROTO_UDP;
		rest += 6;
	}
	if (strlen(rest) >= sizeof(buf) || !*rest)
		return wl_err("%s: '%s' is not an address", what, spec);
	strcpy(buf, rest);
	if (split_host_port(buf, &host, &port) < 0)
		return wl_err("%s: '%s': expected host[:port] or [v6addr]:port", what, spec);
	char mapped[96];
	for (int i = 0; i < resolve_n; i++) {
		if (strcmp(resolve_map[i].name, host) != 0)
			continue;
		char *mport;
		strcpy(mapped, resolve_map[i].target);
		if (split_host_port(mapped, &host, &mport) < 0)
			return wl_err("%s: --resolve target '%s' is malformed", what, resolve_map[i].target);
		if (!port)
			port = mport; /* a port in the spec wins over the mapping's */
		break;
	}
	long portnum = WL_DEFAULT_PORT;
	if (port) {
		char *end;
		portnum = strtol(port, &end, 10);
		if (*end || end == port || portnum < 0 || portnum > 65535)
			return wl_err("%s: '%s': port '%s' is not 0..65535", what, spec, port);
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICSERV};
	hints.ai_socktype = out->proto == WL_PROTO_UDP ? SOCK_DGRAM : SOCK_STREAM;
	struct addrinfo *res;
	char portstr[8];
	snprintf(portstr, sizeof(portstr), "%ld", portnum);
	int rc = getaddrinfo(*host ? host : NULL, portstr, &hints, &res);
	if (rc != 0)
		return wl_err("%s: cannot resolve '%s': %s (map names with --resolve name=addr:port)", what, host,
			      gai_strerror(rc));
	memcpy(&out->sa, res->ai_addr, res->ai_addrlen);
	out->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

uint16_t wl_addr_port(const struct wl_addr *a)
{
	if (a->sa.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
	return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
}

int wl_addr_family(const struct wl_addr *a) { return a->sa.ss_family == AF_INET6 ? 6 : 4; }

void wl_addr_raw(const struct wl_addr *a, uint8_t out[16])
{
	memset(out, 0, 16);
	if (a->sa.ss_family == AF_INET6)
		memcpy(out, &((const struct sockaddr_in6 *)&a->sa)->sin6_addr, 16);
	else
		memcpy(out, &((const struct sockaddr_in *)&a->sa)->sin_addr, 4);
}

void wl_addr_from_raw(struct wl_addr *a, int proto, int family, const uint8_t raw[16], uint16_t port)
{
	memset(a, 0, sizeof(*a));
	a->proto = proto;
	if (family == 6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&a->sa;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, raw, 16);
		a->salen = sizeof(*s);
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)&a->sa;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, raw, 4);
		a->salen = sizeof(*s);
	}
	char host[INET6_ADDRSTRLEN] = "?";
	inet_ntop(family == 6 ? AF_INET6 : AF_INET, raw, host, sizeof(host));
	snprintf(a->text, sizeof(a->text), "%s://%s:%u", proto == WL_PROTO_UDP ? "udp" : "tcp", host, port);
}

int wl_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return wl_err("fcntl(fd %d, O_NONBLOCK): %s", fd, strerror(errno));
	return 0;
}

int wl_set_nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return wl_err("setsockopt(fd %d, TCP_NODELAY): %s", fd, strerror(errno));
	return 0;
}

int wl_listen(const struct wl_addr *a, int backlog, bool reuseport)
{
	int udp = a->proto == WL_PROTO_UDP, one = 1;
	int fd = socket(a->sa.ss_family, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return wl_err("socket for %s: %s", a->text, strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)) {
		wl_err("setsockopt on %s: %s", a->text, strerror(errno));
		goto fail;
	}
	if (bind(fd, (const struct sockaddr *)&a->sa, a->salen) < 0) {
		wl_err("bind %s: %s", a->text, strerror(errno));
		goto fail;
	}
	if (!udp && listen(fd, backlog) < 0) {
		wl_err("listen %s (backlog %d): %s", a->text, backlog, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

int wl_connect(const struct wl_addr *a, bool nonblock, bool nodelay)
{
	int udp = a->proto == WL_PROTO_UDP;
	int fd = socket(a->sa.ss_family, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wl_err("socket for %s: %s", a->text, strerror(errno));
	if ((nonblock && wl_set_nonblock(fd) < 0) || (!udp && nodelay && wl_set_nodelay(fd) < 0))
		goto fail;
	if (connect(fd, (const struct sockaddr *)&a->sa, a->salen) < 0 && !(nonblock && errno == EINPROGRESS)) {
		wl_err("connect %s: %s", a->text, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}
