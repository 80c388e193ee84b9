/* pingpong: the kernel's own loopback TCP round trip, as the floor under
 * wl-node/wl-client figures (bench/workload_bench.py builds and runs it).
 *
 * Two processes, like a node and a client: the server echoes a 48-byte
 * reply for each 62-byte request (the sizes of a `-C 0` request and its
 * reply); the client sends at a fixed rate with absolute sleeps, one request
 * in flight, and times each round trip from before send to after the reply's
 * last byte. No parsing, no bookkeeping: whatever a real program measures
 * above this is its own cost.
 *
 * usage: pingpong --server-cpu N --client-cpu M --rate R -n COUNT [--spin]
 *   --spin  both sides poll with non-blocking recv and the client spins on
 *           the clock, as wl-node/wl-client --busy-poll do
 * Prints one JSON object: {"p50_us": .., "p99_us": .., "count": ..}. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { REQ_BYTES = 62, REPLY_BYTES = 48 };

static int spin;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "pingpong: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity");
}

/* Exactly n bytes, blocking or polling; 0 at end of stream. */
static int take(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = recv(fd, buf + got, n - got, spin ? MSG_DONTWAIT : MSG_WAITALL);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k <= 0)
			return 0;
		got += (size_t)k;
	}
	return 1;
}

static void give(int fd, const char *buf, size_t n)
{
	if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
		die("send");
}

static void nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("TCP_NODELAY");
}

static void serve(int lfd, int cpu)
{
	pin(cpu);
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	nodelay(fd);
	char req[REQ_BYTES], reply[REPLY_BYTES] = {0};
	while (take(fd, req, sizeof(req)))
		give(fd, reply, sizeof(reply));
	_exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int server_cpu = -1, client_cpu = -1;
	double rate = 0;
	long count = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--spin"))
			spin = 1;
		else if (v && !strcmp(a, "--server-cpu"))
			server_cpu = atoi(argv[++i]);
		else if (v && !strcmp(a, "--client-cpu"))
			client_cpu = atoi(argv[++i]);
		else if (v && !strcmp(a, "--rate"))
			rate = atof(argv[++i]);
		else if (v && !strcmp(a, "-n"))
			count = atol(argv[++i]);
		else {
			fprintf(stderr, "pingpong: unknown or incomplete option '%s'\n"
					"usage: pingpong --server-cpu N --client-cpu M --rate R -n COUNT [--spin]\n", a);
			return 2;
		}
	}
	if (server_cpu < 0 || client_cpu < 0 || rate <= 0 || count <= 0) {
		fprintf(stderr, "pingpong: --server-cpu, --client-cpu, --rate > 0 and -n > 0 are required\n");
		return 2;
	}
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(addr);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, len) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
		die("listen on 127.0.0.1");
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0)
		serve(lfd, server_cpu);
	close(lfd);
	pin(client_cpu);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, len) < 0)
		die("connect");
	nodelay(fd);
	uint64_t *rtt = malloc((size_t)count * sizeof(*rtt));
	if (!rtt)
		die("malloc");
	char req[REQ_BYTES] = {0}, reply[REPLY_BYTES];
	uint64_t start = now_ns() + 10000000, period = (uint64_t)(1e9 / rate);
	for (long i = 0; i < count; i++) {
		uint64_t due = start + (uint64_t)i * period;
		if (spin) {
			while (now_ns() < due)
				;
		} else {
			struct timespec ts = {.tv_sec = (time_t)(due / 1000000000u), .tv_nsec = (long)(due % 1000000000u)};
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		uint64_t t0 = now_ns();
		give(fd, req, sizeof(req));
		if (!take(fd, reply, sizeof(reply))) {
			fprintf(stderr, "pingpong: the server closed the connection\n");
			return 1;
		}
		rtt[i] = now_ns() - t0;
	}
	close(fd);
	waitpid(child, NULL, 0);
	qsort(rtt, (size_t)count, sizeof(*rtt), cmp_u64);
	printf("{\"p50_us\": %.3f, \"p99_us\": %.3f, \"count\": %ld}\n", rtt[count / 2] / 1e3,
	       rtt[(size_t)((double)count * 0.99)] / 1e3, count);
	return 0;
}
