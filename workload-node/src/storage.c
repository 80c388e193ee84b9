/* storage: one thread does all LOAD/STORE I/O on the node's storage file, so
 * workers never block on disk and large transfers are serialized. Offsets
 * wrap at the configured maximum file size; O_DIRECT transfers are widened
 * to whole aligned blocks; psync stores are flushed by a periodic fsync. */
#include "storage.h"
#include "storage_file.h"
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIRECT_ALIGN 4096u

struct wl_storage {
	struct wl_node *node;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wl_job *head, *tail;
	bool stop, dirty, started;
	struct wl_storage_file file;
	int fd; /* file.fd */
	uint8_t *buf;
	size_t buf_cap;
	uint64_t fsyncs, errors;
};

static int ensure_buf(struct wl_storage *st, size_t n)
{
	if (n <= st->buf_cap)
		return 0;
	void *p;
	int rc = posix_memalign(&p, DIRECT_ALIGN, n);
	if (rc != 0)
		return wl_err("storage: cannot allocate a %zu-byte aligned buffer: %s", n, strerror(rc));
	memset(p, 0xa5, n); /* stored bytes are a fixed pattern; content does not matter */
	free(st->buf);
	st->buf = p;
	st->buf_cap = n;
	return 0;
}

static int do_fsync(struct wl_storage *st)
{
	if (fsync(st->fd) < 0)
		return wl_err("storage: fsync %s: %s", st->file.path, strerror(errno));
	__atomic_fetch_add(&st->fsyncs, 1, __ATOMIC_RELAXED);
	return 0;
}

static int do_io(struct wl_storage *st, const struct wl_op *op)
{
	const struct wl_node_cfg *cfg = &st->node->cfg;
	uint64_t max = cfg->storage_max_bytes, off = op->io.offset % max;
	size_t len = op->io.bytes;
	if (len > max)
		return wl_err("storage: %zu-byte transfer exceeds --max-storage-size %llu", len, (unsigned long long)max);
	if (off + len > max)
		off = 0; /* the transfer would cross the end: wrap to the start, like a ring */
	if (cfg->odirect) {
		uint64_t start = off & ~(uint64_t)(DIRECT_ALIGN - 1);
		len = (size_t)((off + len - start + DIRECT_ALIGN - 1) & ~(uint64_t)(DIRECT_ALIGN - 1));
		off = start;
	}
	if (ensure_buf(st, len ? len : 1) < 0)
		return -1;
	size_t done = 0;
	while (done < len) {
		ssize_t n = op->kind == WL_OP_STORE ? pwrite(st->fd, st->buf + done, len - done, (off_t)(off + done))
						   : pread(st->fd, st->buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wl_err("storage: %s %zu bytes at %llu of %s: %s", op->kind == WL_OP_STORE ? "pwrite" : "pread",
				      len - done, (unsigned long long)(off + done), st->file.path, strerror(errno));
		if (n == 0) /* reading past the written part of a sparse file: reads as zeros */
			break;
		done += (size_t)n;
	}
	if (op->kind == WL_OP_STORE) {
		/* DistWalk: with --sync, a syncing store waits for no fsync of its own */
		if (op->flags == WL_SYNC_EACH && !cfg->sync_given)
			return do_fsync(st);
		if (op->flags == WL_SYNC_PERIODIC || op->flags == WL_SYNC_EACH)
			st->dirty = true;
	}
	return 0;
}

/* --wait-spin-storage: poll the queue (lock released) until a job or the next periodic sync is due. */
static void spin_for_work(struct wl_storage *st, uint64_t next_sync)
{
	pthread_mutex_unlock(&st->lock);
	while (!__atomic_load_n(&st->head, __ATOMIC_ACQUIRE) && !__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) &&
	       wl_now_ns() < next_sync)
		;
	pthread_mutex_lock(&st->lock);
}

/* Sleep (the lock held) until a job is queued or the next periodic sync is due. */
static void sleep_for_work(struct wl_storage *st, uint64_t next_sync)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = wl_now_ns(), wait = next_sync > now ? next_sync - now : 0;
	uint64_t ns = (uint64_t)ts.tv_nsec + wait;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(&st->cond, &st->lock, &ts);
}

/* The job's LOAD or STORE, then the job back to its worker. */
static void run_job(struct wl_storage *st, struct wl_job *j)
{
	j->op_status = do_io(st, &j->op) < 0 ? WL_ST_ERR : WL_ST_OK;
	WL_COUNT(j->w, loads, j->op.kind == WL_OP_LOAD);
	WL_COUNT(j->w, stores, j->op.kind == WL_OP_STORE);
	if (j->op_status != WL_ST_OK)
		__atomic_fetch_add(&st->errors, 1, __ATOMIC_RELAXED);
	wl_inbox_post_job(&j->w->inbox, j);
}

static void *storage_main(void *arg)
{
	struct wl_storage *st = arg;
	uint64_t period = st->node->cfg.psync_period_ns, next_sync = wl_now_ns() + period;
	pthread_mutex_lock(&st->lock);
	while (!st->stop) {
		if (!st->head && st->node->cfg.storage_spin)
			spin_for_work(st, next_sync);
		else if (!st->head)
			sleep_for_work(st, next_sync);
		struct wl_job *j = st->head;
		if (j) {
			st->head = j->next;
			if (!st->head)
				st->tail = NULL;
		}
		pthread_mutex_unlock(&st->lock);
		if (j)
			run_job(st, j);
		if (wl_now_ns() >= next_sync) {
			if (st->dirty && do_fsync(st) == 0)
				st->dirty = false;
			next_sync = wl_now_ns() + period;
		}
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

int wl_storage_open(struct wl_node *node)
{
	struct wl_storage *st = calloc(1, sizeof(*st));
	if (!st)
		return wl_err("storage: out of memory");
	st->node = node;
	if (wl_storage_file_open(node->cfg.storage_path, node->cfg.odirect, &st->file) < 0) {
		free(st);
		return -1;
	}
	st->fd = st->file.fd;
	pthread_mutex_init(&st->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->cond, &ca);
	pthread_condattr_destroy(&ca);
	int rc = pthread_create(&st->thread, NULL, storage_main, st);
	if (rc != 0) {
		wl_storage_file_close(&st->file);
		free(st);
		return wl_err("storage: pthread_create: %s", strerror(rc));
	}
	st->started = true;
	node->storage = st;
	return 0;
}

void wl_storage_submit(struct wl_storage *st, struct wl_job *job)
{
	if (!st) { /* no storage configured */
		job->op_status = WL_ST_ERR;
		wl_inbox_post_job(&job->w->inbox, job);
		return;
	}
	pthread_mutex_lock(&st->lock);
	job->next = NULL;
	if (st->tail)
		st->tail->next = job;
	else
		__atomic_store_n(&st->head, job, __ATOMIC_RELEASE); /* a spinning storage thread reads it unlocked */
	st->tail = job;
	pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

void wl_storage_counters(struct wl_storage *st, uint64_t *fsyncs, uint64_t *errors)
{
	*fsyncs = st ? __atomic_load_n(&st->fsyncs, __ATOMIC_RELAXED) : 0;
	*errors = st ? __atomic_load_n(&st->errors, __ATOMIC_RELAXED) : 0;
}

void wl_storage_close(struct wl_storage *st)
{
	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	__atomic_store_n(&st->stop, true, __ATOMIC_RELEASE);
	pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->thread, NULL);
	if (st->dirty && fsync(st->fd) < 0)
		wl_err("storage: final fsync: %s", strerror(errno));
	wl_storage_file_close(&st->file);
	/* Jobs still queued belong to workers that have stopped; free them. */
	while (st->head) {
		struct wl_job *j = st->head;
		st->head = j->next;
		free(j->msg);
		free(j);
	}
	free(st->buf);
	free(st);
}
