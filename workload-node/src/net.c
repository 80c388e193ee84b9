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

/* --check: no name goes to DNS; --names: the only host names a target may have. */
static bool offline;
static char **known_names;
static int nknown;
static bool names_given; /* --names, even an empty list: then every name is unknown */

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

void wl_addr_offline(bool on) { offline = on; }

int wl_addr_known_names(const char *list)
{
	names_given = true;
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ","), name_len = strcspn(p, ",:"); /* an entry may carry a port: name:port */
		if (n == 0 || name_len == 0)
			return wl_err("--names '%s': expected NAME[:PORT],NAME[:PORT],...", list);
		char **grown = realloc(known_names, ((size_t)nknown + 1) * sizeof(*known_names));
		if (!grown)
			return wl_err("--names: out of memory");
		known_names = grown;
		if (!(known_names[nknown] = strndup(p, name_len)))
			return wl_err("--names: out of memory");
		nknown++;
		p += n + (p[n] == ',');
	}
	return 0;
}

static bool is_known(const char *host)
{
	for (int i = 0; i < nknown; i++)
		if (!strcmp(known_names[i], host))
			return true;
	for (int i = 0; i < resolve_n; i++)
		if (!strcmp(resolve_map[i].name, host))
			return true;
	return false;
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

static bool is_word(const char *text, size_t n, const char *word)
{
	return strlen(word) == n && !strncmp(text, word, n);
}

/* "tcp://", "udp://", DistWalk's "tcp:"/"udp:" and a bare "tcp"/"udp"; TLS and DPDK are not built in. */
static int parse_proto(const char *spec, const char **rest, int *proto, const char *what)
{
	static const struct { const char *name; int proto; } protos[] = {{"tcp", WL_PROTO_TCP}, {"udp", WL_PROTO_UDP}};
	*proto = WL_PROTO_TCP;
	*rest = spec;
	const char *sep = strstr(spec, "://");
	size_t n = sep ? (size_t)(sep - spec) : strspn(spec, "abcdefghijklmnopqrstuvwxyz");
	if (n == 0 || (!sep && spec[n] != ':' && spec[n] != '\0'))
		return 0; /* no protocol: a host (names may hold letters only, "db") */
	for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++) {
		if (!is_word(spec, n, protos[i].name))
			continue;
		*proto = protos[i].proto;
		*rest = sep ? sep + 3 : spec + n + (spec[n] == ':');
		if (!sep && **rest == ':')
			return wl_err("%s: '%s': expected %s://host:port or %s:host:port", what, spec, protos[i].name,
				      protos[i].name);
		return 0;
	}
	if (is_word(spec, n, "ssl") || is_word(spec, n, "dpdk"))
		return wl_err("%s: '%s': %.*s is not supported (wl-node and wl-client speak TCP and UDP)", what, spec,
			      (int)n, spec);
	if (sep)
		return wl_err("%s: '%s': unknown protocol '%.*s' (expected tcp:// or udp://)", what, spec, (int)n, spec);
	return 0; /* "db:7000" or "localhost": a host whose name happens to be all letters */
}

static bool is_literal(const char *host)
{
	uint8_t raw[16];
	return inet_pton(AF_INET, host, raw) == 1 || inet_pton(AF_INET6, host, raw) == 1;
}

static bool valid_name(const char *host)
{
	size_t n = strlen(host);
	return n > 0 && n < 254 && strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == n &&
	       host[0] != '-' && host[0] != '.';
}

/* Numeric addresses never go to DNS; names do, IPv4 first (nodes listen on
 * IPv4 by default, and "localhost" may list ::1 first). */
static int resolve_host(const char *host, long port, struct wl_addr *out, const char *what)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_NUMERICSERV};
	hints.ai_socktype = out->proto == WL_PROTO_UDP ? SOCK_DGRAM : SOCK_STREAM;
	if (*host && is_literal(host)) {
		hints.ai_family = AF_UNSPEC;
		hints.ai_flags |= AI_NUMERICHOST;
	} else if (offline && *host) {
		/* --check: the name stays a name; the port is what a run would use */
		struct sockaddr_in *sin = (struct sockaddr_in *)&out->sa;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		out->salen = sizeof(*sin);
		out->unresolved = true;
		return 0;
	}
	struct addrinfo *res;
	char portstr[8];
	snprintf(portstr, sizeof(portstr), "%ld", port);
	int rc = getaddrinfo(*host ? host : NULL, portstr, &hints, &res);
	if (rc != 0 && hints.ai_family == AF_INET) {
		hints.ai_family = AF_UNSPEC;
		rc = getaddrinfo(*host ? host : NULL, portstr, &hints, &res);
	}
	if (rc != 0)
		return wl_err("%s: cannot resolve '%s': %s (map names with --resolve name=addr:port)", what, host,
			      gai_strerror(rc));
	memcpy(&out->sa, res->ai_addr, res->ai_addrlen);
	out->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int parse_addr(const char *spec, struct wl_addr *out, const char *what, bool target, long default_port)
{
	char buf[160], *host, *port;
	const char *rest;
	memset(out, 0, sizeof(*out));
	snprintf(out->text, sizeof(out->text), "%s", spec);
	if (parse_proto(spec, &rest, &out->proto, what) < 0)
		return -1;
	if (strlen(rest) >= sizeof(buf))
		return wl_err("%s: '%s' is not an address", what, spec);
	strcpy(buf, rest);
	if (split_host_port(buf, &host, &port) < 0)
		return wl_err("%s: '%s': expected host[:port] or [v6addr]:port", what, spec);
	if (*host && !is_literal(host) && !valid_name(host))
		return wl_err("%s: '%s': '%s' is not a host name or address", what, spec, host);
	snprintf(out->host, sizeof(out->host), "%s", host);
	if (target && names_given && *host && !is_literal(host) && !is_known(host))
		return wl_err("%s: unknown target '%s' (not one of --names)", what, host);
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
	long portnum = default_port;
	if (port) {
		char *end;
		portnum = strtol(port, &end, 10);
		if (*end || end == port || portnum < 0 || portnum > 65535)
			return wl_err("%s: '%s': port '%s' is not 0..65535", what, spec, port);
	}
	return resolve_host(host, portnum, out, what);
}

int wl_addr_parse(const char *spec, struct wl_addr *out, const char *what)
{
	return parse_addr(spec, out, what, true, WL_DEFAULT_PORT);
}

int wl_addr_parse_local(const char *spec, struct wl_addr *out, const char *what, uint16_t default_port)
{
	return parse_addr(spec, out, what, false, default_port);
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

int wl_connect_from(const struct wl_addr *a, const struct wl_addr *local, bool nonblock, bool nodelay)
{
	int udp = a->proto == WL_PROTO_UDP, one = 1;
	int fd = socket(a->sa.ss_family, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wl_err("socket for %s: %s", a->text, strerror(errno));
	if ((nonblock && wl_set_nonblock(fd) < 0) || (!udp && nodelay && wl_set_nodelay(fd) < 0))
		goto fail;
	/* -b: a fixed source port is reused at once by the next session */
	if (local && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		      bind(fd, (const struct sockaddr *)&local->sa, local->salen) < 0)) {
		wl_err("bind %s before connecting to %s: %s", local->text, a->text, strerror(errno));
		goto fail;
	}
	if (connect(fd, (const struct sockaddr *)&a->sa, a->salen) < 0 && !(nonblock && errno == EINPROGRESS)) {
		wl_err("connect %s: %s", a->text, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

int wl_connect(const struct wl_addr *a, bool nonblock, bool nodelay)
{
	return wl_connect_from(a, NULL, nonblock, nodelay);
}
