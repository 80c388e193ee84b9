/* util: error reporting with context, clocks, growable byte buffers. */
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *progname = "wl";
static bool plain_errors; /* while reading the command line: "prog: message", one line */

void wl_set_progname(const char *name) { progname = name; }
void wl_set_plain_errors(bool on) { plain_errors = on; }

int wl_error_at(const char *func, const char *file, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (plain_errors)
		fprintf(stderr, "%s: %s\n", progname, msg);
	else
		fprintf(stderr, "%s: %s (%s:%d): %s\n", progname, func, file, line, msg);
	return -1;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	/* clock_gettime cannot fail for these clock ids on Linux; abort loudly if it does. */
	if (clock_gettime(id, &ts) != 0) {
		wl_err("clock_gettime(%d): %s", (int)id, strerror(errno));
		abort();
	}
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t wl_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t wl_realtime_ns(void) { return clock_ns(CLOCK_REALTIME); }
uint64_t wl_thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

/* A spinner at a real-time priority never leaves its core, so the thread
 * that waits for signals (blocked in sigwait, same priority, same core)
 * would never run and Ctrl-C would never be handled. Checking the pending
 * set costs a system call, hence only once a millisecond. */
void wl_spin_check_signals(uint64_t *next_check_ns)
{
	uint64_t now = wl_now_ns();
	if (now < *next_check_ns)
		return;
	*next_check_ns = now + 1000000;
	sigset_t pending;
	if (sigpending(&pending) == 0 &&
	    (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) || sigismember(&pending, SIGUSR1)))
		sched_yield();
}

int wl_grow(void *arr, size_t *cap, size_t n, size_t elem, size_t first)
{
	if (n < *cap)
		return 0;
	size_t grown = *cap ? *cap * 2 : first;
	void *old, *bigger;
	memcpy(&old, arr, sizeof(old)); /* arr points at a T *, whatever T is */
	if (grown > SIZE_MAX / elem || !(bigger = realloc(old, grown * elem)))
		return -1;
	memcpy(arr, &bigger, sizeof(bigger));
	*cap = grown;
	return 0;
}

int wl_buf_reserve(struct wl_buf *buf, size_t extra)
{
	if (buf->len + extra <= buf->cap)
		return 0;
	if (buf->off > 0 && buf->off >= buf->len / 2) {
		wl_buf_compact(buf);
		if (buf->len + extra <= buf->cap)
			return 0;
	}
	return wl_buf_grow(buf, extra);
}

int wl_buf_grow(struct wl_buf *buf, size_t extra)
{
	if (buf->len + extra <= buf->cap)
		return 0;
	size_t cap = buf->cap ? buf->cap : 4096;
	while (cap < buf->len + extra)
		cap *= 2;
	uint8_t *data = realloc(buf->data, cap);
	if (!data)
		return wl_err("realloc %zu bytes: out of memory", cap);
	buf->data = data;
	buf->cap = cap;
	return 0;
}

void wl_buf_compact(struct wl_buf *buf)
{
	if (buf->off == 0)
		return;
	memmove(buf->data, buf->data + buf->off, buf->len - buf->off);
	buf->len -= buf->off;
	buf->off = 0;
}

void wl_buf_free(struct wl_buf *buf)
{
	free(buf->data);
	*buf = (struct wl_buf){0};
}

int wl_parse_cpulist(const char *spec, int *cpus, int max_cpus)
{
	int n = 0;
	const char *p = spec;
	while (*p) {
		char *end;
		long lo = strtol(p, &end, 10);
		if (end == p || lo < 0)
			return wl_err("cpu list '%s': expected a number at '%s'", spec, p);
		long hi = lo, step = 1;
		p = end;
		if (*p == '-') {
			hi = strtol(p + 1, &end, 10);
			if (end == p + 1 || hi < lo)
				return wl_err("cpu list '%s': bad range end at '%s'", spec, p);
			p = end;
			if (*p == ':') { /* lo-hi:step, as taskset writes it */
				step = strtol(p + 1, &end, 10);
				if (end == p + 1 || step < 1)
					return wl_err("cpu list '%s': bad step at '%s'", spec, p);
				p = end;
			}
		}
		for (long c = lo; c <= hi; c += step) {
			if (n == max_cpus)
				return wl_err("cpu list '%s': more than %d cpus", spec, max_cpus);
			cpus[n++] = (int)c;
		}
		if (*p == ',')
			p++;
		else if (*p)
			return wl_err("cpu list '%s': unexpected '%c'", spec, *p);
	}
	if (n == 0)
		return wl_err("cpu list '%s' is empty", spec);
	return n;
}

int wl_pin_thread(int cpu, const char *who)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (ncpu < 0)
		return wl_err("sysconf(_SC_NPROCESSORS_CONF): %s", strerror(errno));
	if (cpu >= ncpu) {
		/* Paper command lines name CPUs of bigger machines (-c 2-18); run them
		 * anyway and say so instead of refusing or pinning elsewhere silently. */
		fprintf(stderr, "%s: warning: %s: cpu %d does not exist on this %ld-cpu machine, not pinned\n",
			progname, who, cpu, ncpu);
		return 0;
	}
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (rc != 0)
		return wl_err("%s: pin to cpu %d: %s", who, cpu, strerror(rc));
	return 0;
}
