/* trace: OTLP/JSON span writer shared by the threads of one process. */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct wl_trace {
	FILE *f;
	pthread_mutex_t lock;
	char service[64];
};

struct wl_trace *wl_trace_open(const char *path, const char *service_name)
{
	struct wl_trace *t = calloc(1, sizeof(*t));
	if (!t) {
		wl_err("trace %s: out of memory", path);
		return NULL;
	}
	t->f = fopen(path, "w");
	if (!t->f) {
		wl_err("open trace file %s: %s", path, strerror(errno));
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	snprintf(t->service, sizeof(t->service), "%s", service_name);
	return t;
}

void wl_trace_close(struct wl_trace *t)
{
	if (!t)
		return;
	if (fclose(t->f) != 0)
		wl_err("close trace file: %s", strerror(errno));
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void wl_trace_new_id(uint8_t *out, size_t n)
{
	static uint64_t counter;
	uint64_t base = wl_realtime_ns() ^ ((uint64_t)getpid() << 40);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = mix(base + __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED));
		for (size_t k = 0; k < 8 && i + k < n; k++)
			out[i + k] = (uint8_t)(v >> (8 * k));
	}
}

bool wl_trace_id_is_zero(const uint8_t *id, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (id[i])
			return false;
	return true;
}

static void hex(char *dst, const uint8_t *src, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		dst[2 * i] = digits[src[i] >> 4];
		dst[2 * i + 1] = digits[src[i] & 15];
	}
	dst[2 * n] = '\0';
}

void wl_trace_span(struct wl_trace *t, const uint8_t trace_id[16], const uint8_t span_id[8],
		   const uint8_t parent_span[8], const char *name, uint64_t start_rt_ns, uint64_t end_rt_ns,
		   int status, const char *attrs)
{
	if (!t)
		return;
	char tid[33], sid[17], pid[17] = "";
	hex(tid, trace_id, 16);
	hex(sid, span_id, 8);
	if (parent_span && !wl_trace_id_is_zero(parent_span, 8))
		hex(pid, parent_span, 8);
	/* OTLP status code: 1 OK, 2 ERROR. */
	pthread_mutex_lock(&t->lock);
	fprintf(t->f,
		"{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":\"%s\"}}]},"
		"\"scopeSpans\":[{\"scope\":{\"name\":\"collapsar-workload\"},\"spans\":[{\"traceId\":\"%s\",\"spanId\":\"%s\","
		"\"parentSpanId\":\"%s\",\"name\":\"%s\",\"kind\":%d,\"startTimeUnixNano\":\"%" PRIu64 "\","
		"\"endTimeUnixNano\":\"%" PRIu64 "\",\"attributes\":[%s],\"status\":{\"code\":%d}}]}]}]}\n",
		t->service, tid, sid, pid, name, pid[0] ? 1 : 2, start_rt_ns, end_rt_ns, attrs ? attrs : "",
		status == 0 ? 1 : 2);
	pthread_mutex_unlock(&t->lock);
}
