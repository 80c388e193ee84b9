/* collect: wl-client's share of the run directory (rundir.h). With
 * COLLAPSAR_TRACE_DIR set and no --trace, a request's record goes to
 * INSTANCE.requests.csv (the -o format) once it and every earlier request
 * of its pair are resolved. A thread of its own writes them every second,
 * so a client that is killed loses at most a second of records, while the
 * pairs never touch the file; at exit the rest follow, and the summary
 * goes to INSTANCE.summary.json: the --json object plus "instance" and
 * "service" (and "run_id" when the run has one). Records of different
 * pairs interleave in the file; within a pair they are in order. */
#include "client.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 1000000000ull

struct wl_collect {
	struct client *cl;
	struct pair *pairs;
	uint64_t *next; /* per pair: its first record not yet written */
	FILE *requests;
	int summary_fd;
	struct wl_identity id;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t tick;
	bool stop, failed;
};

/* Write the records resolved in order since the last call (all: every sent one left). */
static void write_resolved(struct wl_collect *c, bool all)
{
	for (int t = 0; t < c->cl->npairs; t++) {
		const struct wl_record *recs = c->pairs[t].recs;
		uint64_t k = c->next[t];
		for (; k < c->cl->nreq; k++) {
			char line[WL_RECORD_LINE];
			if (!all && !__atomic_load_n(&recs[k].done, __ATOMIC_ACQUIRE))
				break;
			if (recs[k].status != WL_ST_UNSENT)
				fwrite(line, 1, (size_t)wl_record_line(line, &recs[k], false, c->cl->start_ns), c->requests);
		}
		c->next[t] = k;
	}
	if ((fflush(c->requests) != 0 || ferror(c->requests)) && !c->failed) {
		wl_err("write %s/%s.requests.csv: %s", wl_rundir(), c->id.instance, strerror(errno));
		c->failed = true;
	}
}

static void *collect_main(void *arg)
{
	struct wl_collect *c = arg;
	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		struct timespec at;
		clock_gettime(CLOCK_MONOTONIC, &at);
		uint64_t ns = (uint64_t)at.tv_nsec + PERIOD_NS;
		at.tv_sec += (time_t)(ns / 1000000000ull);
		at.tv_nsec = (long)(ns % 1000000000ull);
		pthread_cond_timedwait(&c->tick, &c->lock, &at);
		pthread_mutex_unlock(&c->lock);
		write_resolved(c, false);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static int start_thread(struct wl_collect *c)
{
	pthread_condattr_t ca;
	sigset_t all, old;
	if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&c->tick, &ca) != 0)
		return wl_err("collect: cannot make the writer's condition variable");
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->lock, NULL);
	sigfillset(&all); /* signals stay with the client's signal thread */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->thread, NULL, collect_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&c->tick);
		pthread_mutex_destroy(&c->lock);
		return wl_err("collect: start the records writer: %s", strerror(rc));
	}
	return 0;
}

static void collect_free(struct wl_collect *c)
{
	if (c->requests && fclose(c->requests) != 0)
		wl_err("close %s/%s.requests.csv: %s", wl_rundir(), c->id.instance, strerror(errno));
	if (c->summary_fd >= 0 && close(c->summary_fd) != 0)
		wl_err("close %s/%s.summary.json: %s", wl_rundir(), c->id.instance, strerror(errno));
	free(c->next);
	free(c);
}

int wl_collect_start(struct wl_collect **out, struct client *cl, struct pair *pairs)
{
	*out = NULL;
	const char *dir = wl_rundir();
	if (!dir || cl->trace_path)
		return 0;
	struct wl_collect *c = calloc(1, sizeof(*c));
	if (!c)
		return wl_err("collect: out of memory");
	*c = (struct wl_collect){.cl = cl, .pairs = pairs, .summary_fd = -1};
	c->next = calloc((size_t)cl->npairs, sizeof(*c->next));
	if (cl->trace) /* set up from the same directory: the same names */
		c->id = *wl_trace_identity(cl->trace);
	else if (wl_identity_load(&c->id, "wl-client") < 0 || wl_rundir_check_instance(c->id.instance) < 0)
		goto fail;
	if (!c->next) {
		wl_err("collect: out of memory for %d pairs", cl->npairs);
		goto fail;
	}
	int fd = wl_rundir_create(dir, c->id.instance, "requests.csv");
	if (fd < 0)
		goto fail;
	if (!(c->requests = fdopen(fd, "w"))) {
		wl_err("fdopen %s/%s.requests.csv: %s", dir, c->id.instance, strerror(errno));
		close(fd);
		goto fail;
	}
	fputs(WL_RECORDS_CSV_HEADER, c->requests);
	if ((c->summary_fd = wl_rundir_create(dir, c->id.instance, "summary.json")) < 0 || start_thread(c) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	collect_free(c);
	return -1;
}

static int write_summary(struct wl_collect *c, const struct wl_summary *total)
{
	char inst[sizeof(c->id.instance) * 6], svc[sizeof(c->id.service) * 6], run[sizeof(c->id.run_id) * 6];
	char extra[sizeof(inst) + sizeof(svc) + sizeof(run) + 64];
	if (wl_json_escape(inst, sizeof(inst), c->id.instance) < 0 || wl_json_escape(svc, sizeof(svc), c->id.service) < 0 ||
	    wl_json_escape(run, sizeof(run), c->id.run_id) < 0)
		return wl_err("summary: names do not fit");
	int n = snprintf(extra, sizeof(extra), "\"instance\":\"%s\",\"service\":\"%s\"", inst, svc);
	if (c->id.run_id[0])
		snprintf(extra + n, sizeof(extra) - (size_t)n, ",\"run_id\":\"%s\"", run);
	FILE *f = fdopen(c->summary_fd, "w");
	if (!f)
		return wl_err("fdopen %s/%s.summary.json: %s", wl_rundir(), c->id.instance, strerror(errno));
	c->summary_fd = -1; /* f owns it now */
	wl_summary_json(f, total, extra);
	bool failed = ferror(f) != 0;
	if (fclose(f) != 0 || failed)
		return wl_err("write %s/%s.summary.json: %s", wl_rundir(), c->id.instance, strerror(errno));
	return 0;
}

int wl_collect_finish(struct wl_collect *c, const struct wl_summary *total)
{
	if (!c)
		return 0;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->tick);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->tick);
	pthread_mutex_destroy(&c->lock);
	write_resolved(c, true);
	int rc = c->failed ? -1 : 0;
	if (fclose(c->requests) != 0)
		rc = wl_err("close %s/%s.requests.csv: %s", wl_rundir(), c->id.instance, strerror(errno));
	c->requests = NULL;
	if (write_summary(c, total) < 0)
		rc = -1;
	collect_free(c);
	return rc;
}
