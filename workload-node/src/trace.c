/* trace: the span file shared by the threads of one process. Spans are
 * appended to the open line (one ExportTraceServiceRequest) under a lock.
 * Full lines queue in a ring for the flusher thread, which writes them
 * with their resource and scope around them, several in one writev: when
 * WAKE_LINES are full, every second, and at close (the open line too).
 * The threads that make spans never write to the file, and wait only if
 * the ring is full. Why so: a 32 KiB write after every line put a 25 us
 * wait in front of one request in 20 (p99 +15-30 us at 10k req/s, one
 * forward hop, bench/tracing_overhead.py); a four times larger write four
 * times less often meets under 1% of requests. One resource header per
 * line instead of one per span makes the file a third smaller. */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define LINE_BYTES 32768 /* spans per line: well under the 64 KiB line limit of common readers */
#define LINE_CAP (LINE_BYTES + WL_SPAN_TEXT) /* a line's buffer: the last span may pass LINE_BYTES */
#define RING 16      /* lines in memory: 576 KiB */
#define WAKE_LINES 4 /* full lines that wake the flusher */
#define FLUSH_PERIOD_NS 1000000000ull
#define HEAD_MAX 4096 /* three escaped names of WL_NAME_MAX bytes and the rest */
/* 1 (the default): spans share a line. 0: one span per line, each with its
 * own resource header, as the bench's comparison build measures
 * (bench/tracing_overhead.py: make BUILD=... CFLAGS=-DWL_TRACE_BATCH=0). */
#ifndef WL_TRACE_BATCH
#define WL_TRACE_BATCH 1
#endif

static const char line_tail[] = "]}]}]}\n";

struct wl_trace {
	int fd;
	char path[256]; /* for messages */
	struct wl_identity id;
	char head[HEAD_MAX]; /* {"resourceSpans":[{"resource":..,"scopeSpans":[{"scope":..,"spans":[ */
	size_t head_len;
	char sep[sizeof(line_tail) + HEAD_MAX]; /* between two spans of the buffer */
	size_t sep_len;
	pthread_mutex_t lock;   /* everything below */
	pthread_cond_t tick;    /* to the flusher: lines to write, or stop */
	pthread_cond_t drained; /* to appenders: lines were written, the ring has room */
	/* The ring, in order: lines being written, full lines, the open line, free lines. */
	char *lines; /* RING buffers of LINE_CAP bytes */
	size_t len[RING];
	unsigned open, nfull, nwriting;
	bool stop, failed;
	pthread_t flusher;
	uint64_t dropped; /* spans too long for WL_SPAN_TEXT */
};

static int build_head(struct wl_trace *t)
{
	char svc[sizeof(t->id.service) * 6 + 1], inst[sizeof(t->id.instance) * 6 + 1];
	char run[sizeof(t->id.run_id) * 6 + 1], run_attr[sizeof(run) + 80] = "";
	if (wl_json_escape(svc, sizeof(svc), t->id.service) < 0 || wl_json_escape(inst, sizeof(inst), t->id.instance) < 0 ||
	    wl_json_escape(run, sizeof(run), t->id.run_id) < 0)
		return wl_err("trace %s: resource names do not fit", t->path);
	if (t->id.run_id[0])
		snprintf(run_attr, sizeof(run_attr), ",{\"key\":\"collapsar.run_id\",\"value\":{\"stringValue\":\"%s\"}}", run);
	int n = snprintf(t->head, sizeof(t->head),
			 "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
			 "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"%s\"}},"
			 "{\"key\":\"service.instance.id\",\"value\":{\"stringValue\":\"%s\"}}%s,"
			 "{\"key\":\"process.pid\",\"value\":{\"intValue\":\"%ld\"}}]},"
			 "\"scopeSpans\":[{\"scope\":{\"name\":\"collapsar-workload\"},\"spans\":[",
			 svc, inst, run_attr, t->id.pid);
	if (n < 0 || (size_t)n >= sizeof(t->head))
		return wl_err("trace %s: resource header does not fit", t->path);
	t->head_len = (size_t)n;
	if (WL_TRACE_BATCH) {
		t->sep[0] = ',';
		t->sep_len = 1;
	} else { /* close the line and open the next */
		t->sep_len = (size_t)snprintf(t->sep, sizeof(t->sep), "%s%s", line_tail, t->head);
	}
	return 0;
}

static char *line_at(const struct wl_trace *t, unsigned i) { return t->lines + (size_t)(i % RING) * LINE_CAP; }

/* Write n lines from ring index first, each as head, spans, tail, in as
 * few writev calls as the kernel allows. A failure is said once; the
 * process goes on serving without its trace rather than stopping. */
static void write_lines(struct wl_trace *t, unsigned first, unsigned n)
{
	struct iovec iov[3 * RING];
	int count = 0, at = 0;
	for (unsigned i = 0; i < n; i++) {
		iov[count++] = (struct iovec){t->head, t->head_len};
		iov[count++] = (struct iovec){line_at(t, first + i), t->len[(first + i) % RING]};
		iov[count++] = (struct iovec){(void *)line_tail, sizeof(line_tail) - 1};
	}
	while (at < count && !t->failed) {
		ssize_t k = writev(t->fd, iov + at, count - at);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			wl_err("write trace %s: %s (no more spans are written)", t->path, strerror(errno));
			t->failed = true;
			return;
		}
		while (at < count && (size_t)k >= iov[at].iov_len)
			k -= (ssize_t)iov[at++].iov_len;
		if (at < count) {
			iov[at].iov_base = (char *)iov[at].iov_base + k;
			iov[at].iov_len -= (size_t)k;
		}
	}
}

/* Close the open line and open the next, if the ring has room; under lock. */
static bool next_line(struct wl_trace *t)
{
	if (t->nwriting + t->nfull + 1 >= RING)
		return false;
	t->nfull++;
	t->open = (t->open + 1) % RING;
	t->len[t->open] = 0;
	return true;
}

void wl_trace_emit(struct wl_trace *t, struct wl_span *s, int status)
{
	if (!t)
		return;
	wl_span_close(s, status);
	pthread_mutex_lock(&t->lock);
	for (;;) {
		size_t *len = &t->len[t->open];
		if (s->overflow) {
			t->dropped++;
			break;
		}
		if (*len == 0 || *len + t->sep_len + s->len <= LINE_BYTES) {
			char *line = line_at(t, t->open);
			if (*len) {
				memcpy(line + *len, t->sep, t->sep_len);
				*len += t->sep_len;
			}
			memcpy(line + *len, s->text, s->len);
			*len += s->len;
			break;
		}
		if (next_line(t)) {
			if (t->nfull == WAKE_LINES)
				pthread_cond_signal(&t->tick);
			continue;
		}
		pthread_cond_wait(&t->drained, &t->lock); /* the ring is full: the disk is behind */
	}
	pthread_mutex_unlock(&t->lock);
}

static struct timespec deadline_after(uint64_t ns)
{
	struct timespec at;
	clock_gettime(CLOCK_MONOTONIC, &at);
	ns += (uint64_t)at.tv_nsec;
	at.tv_sec += (time_t)(ns / 1000000000ull);
	at.tv_nsec = (long)(ns % 1000000000ull);
	return at;
}

/* Write the full lines when WAKE_LINES of them are there; every second,
 * and at stop, the open line and whatever is full too. */
static void *flusher_main(void *arg)
{
	struct wl_trace *t = arg;
	struct timespec next = deadline_after(FLUSH_PERIOD_NS);
	pthread_mutex_lock(&t->lock);
	for (;;) {
		bool due = t->stop;
		if (t->nfull < WAKE_LINES && !due)
			due = pthread_cond_timedwait(&t->tick, &t->lock, &next) == ETIMEDOUT || t->stop;
		/* Due with a full ring: the open line goes after these (next stays
		 * in the past, so that the next wait returns at once). */
		if (due && (t->len[t->open] == 0 || next_line(t)))
			next = deadline_after(FLUSH_PERIOD_NS);
		if (t->nfull > 0 && (due || t->nfull >= WAKE_LINES)) {
			unsigned first = (t->open + RING - t->nfull) % RING, n = t->nfull;
			t->nwriting = n;
			t->nfull = 0;
			pthread_mutex_unlock(&t->lock);
			write_lines(t, first, n); /* those lines are the flusher's while it writes */
			pthread_mutex_lock(&t->lock);
			t->nwriting = 0;
			pthread_cond_broadcast(&t->drained);
			continue;
		}
		if (t->stop && t->len[t->open] == 0)
			break;
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* The flusher's scheduling: the creating thread's, but in a real-time
 * process (chrt -f/-r) one priority lower, so that a request's thread
 * preempts its writes while the load of ordinary tasks still cannot
 * starve it. Measured at 10k req/s on two CPUs: as SCHED_OTHER in a
 * SCHED_FIFO process it was starved at load 10, the ring filled and the
 * workers waited (p99 10-60 ms); at the workers' own priority its writes
 * held up the requests that came meanwhile. */
static int flusher_attr(pthread_attr_t *attr)
{
	struct sched_param sp;
	int policy, rc = pthread_getschedparam(pthread_self(), &policy, &sp);
	if (rc != 0 || (policy != SCHED_FIFO && policy != SCHED_RR) || sp.sched_priority <= sched_get_priority_min(policy))
		return rc;
	sp.sched_priority--;
	if ((rc = pthread_attr_setinheritsched(attr, PTHREAD_EXPLICIT_SCHED)) == 0 &&
	    (rc = pthread_attr_setschedpolicy(attr, policy)) == 0)
		rc = pthread_attr_setschedparam(attr, &sp);
	return rc;
}

/* The flusher takes no signal: the process's own handling decides. */
static int start_flusher(struct wl_trace *t)
{
	pthread_condattr_t ca;
	pthread_attr_t attr;
	sigset_t all, old;
	if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&t->tick, &ca) != 0)
		return wl_err("trace %s: cannot make the flusher's condition variable", t->path);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&t->drained, NULL);
	int rc = pthread_attr_init(&attr);
	if (rc == 0 && (rc = flusher_attr(&attr)) == 0) {
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rc = pthread_create(&t->flusher, &attr, flusher_main, t);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0) {
		pthread_cond_destroy(&t->drained);
		pthread_cond_destroy(&t->tick);
		return wl_err("trace %s: start the flusher thread: %s", t->path, strerror(rc));
	}
	return 0;
}

static int open_file(const char *path, const struct wl_identity *id, char *shown, size_t cap)
{
	const char *dir = wl_rundir();
	if (path) {
		snprintf(shown, cap, "%s", path);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			wl_err("open trace file %s: %s", path, strerror(errno));
		return fd;
	}
	snprintf(shown, cap, "%s/%s.spans.jsonl", dir, id->instance);
	return wl_rundir_create(dir, id->instance, "spans.jsonl");
}

int wl_trace_setup(const char *path, const char *default_service, struct wl_trace **out)
{
	*out = NULL;
	if (!path && !wl_rundir())
		return 0;
	int rc = 1;
	struct wl_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return wl_err("trace: out of memory"), 1;
	t->fd = -1;
	if (wl_identity_load(&t->id, default_service) < 0 || (!path && wl_rundir_check_instance(t->id.instance) < 0)) {
		rc = 2; /* a name the user gave cannot be used */
		goto cleanup;
	}
	t->lines = malloc((size_t)RING * LINE_CAP);
	if (!t->lines) {
		wl_err("trace: out of memory for its buffers");
		goto cleanup;
	}
	if ((t->fd = open_file(path, &t->id, t->path, sizeof(t->path))) < 0 || build_head(t) < 0)
		goto cleanup;
	pthread_mutex_init(&t->lock, NULL);
	if (start_flusher(t) < 0) {
		pthread_mutex_destroy(&t->lock);
		goto cleanup;
	}
	*out = t;
	return 0;
cleanup:
	if (t->fd >= 0 && close(t->fd) != 0)
		wl_err("close trace file %s: %s", t->path, strerror(errno));
	free(t->lines);
	free(t);
	return rc;
}

const struct wl_identity *wl_trace_identity(const struct wl_trace *t) { return &t->id; }

void wl_trace_close(struct wl_trace *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_signal(&t->tick);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->flusher, NULL); /* it wrote everything before it ended */
	if (t->dropped)
		wl_err("trace %s: %llu spans longer than %d bytes were left out", t->path,
		       (unsigned long long)t->dropped, WL_SPAN_TEXT);
	if (close(t->fd) != 0)
		wl_err("close trace file %s: %s", t->path, strerror(errno));
	pthread_cond_destroy(&t->drained);
	pthread_cond_destroy(&t->tick);
	pthread_mutex_destroy(&t->lock);
	free(t->lines);
	free(t);
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Per thread: a counter seeded from the kernel's entropy (the time, the pid
 * and the stack's address if that is not available), run through a mixer. */
void wl_trace_new_id(uint8_t *out, size_t n)
{
	static __thread uint64_t state;
	static __thread bool seeded;
	if (!seeded) {
		if (getrandom(&state, sizeof(state), GRND_NONBLOCK) != (ssize_t)sizeof(state))
			state = wl_realtime_ns() ^ (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)&state;
		seeded = true;
	}
	do {
		for (size_t i = 0; i < n; i += 8) {
			uint64_t v = mix(state += 0x9e3779b97f4a7c15ull);
			for (size_t k = 0; k < 8 && i + k < n; k++)
				out[i + k] = (uint8_t)(v >> (8 * k));
		}
	} while (wl_trace_id_is_zero(out, n));
}

bool wl_trace_id_is_zero(const uint8_t *id, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (id[i])
			return false;
	return true;
}
