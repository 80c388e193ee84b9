/* util: error reporting with context, clocks, growable byte buffers. */
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Print "prog: func (file:line): message" to stderr and return -1, so a
 * failing call site reads `return wl_err("bind %s: %s", addr, strerror(errno));`. */
int wl_error_at(const char *func, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define wl_err(...) wl_error_at(__func__, __FILE__, __LINE__, __VA_ARGS__)

void wl_set_progname(const char *name);
/* A bad command line is the user's mistake, not the code's: while it is read,
 * errors print as "prog: message" without the function and source line. */
void wl_set_plain_errors(bool on);
uint64_t wl_now_ns(void);        /* CLOCK_MONOTONIC */
uint64_t wl_realtime_ns(void);   /* CLOCK_REALTIME, for trace timestamps */
uint64_t wl_thread_cpu_ns(void); /* CLOCK_THREAD_CPUTIME_ID */

struct wl_buf {
	uint8_t *data;
	size_t len; /* bytes filled */
	size_t off; /* bytes already consumed from the front */
	size_t cap;
	bool oom; /* an append failed for lack of memory (sticky, see wl_enc_ok) */
};

/* A growable array of elem-byte elements holding n: make room for one more,
 * doubling *cap (from first) when full. arr is the address of the array
 * pointer. 0, or -1 when out of memory (the array and *cap unchanged). */
int wl_grow(void *arr, size_t *cap, size_t n, size_t elem, size_t first);

int wl_buf_reserve(struct wl_buf *buf, size_t extra); /* may compact: offsets into the buffer move */
int wl_buf_grow(struct wl_buf *buf, size_t extra);    /* never moves data within the buffer */
void wl_buf_compact(struct wl_buf *buf);
void wl_buf_free(struct wl_buf *buf);
static inline size_t wl_buf_avail(const struct wl_buf *buf) { return buf->len - buf->off; }
static inline uint8_t *wl_buf_head(const struct wl_buf *buf) { return buf->data + buf->off; }

/* For a busy-polling loop: about every millisecond, if SIGINT, SIGTERM or
 * SIGUSR1 is pending, yield so that the thread waiting for it can run. */
void wl_spin_check_signals(uint64_t *next_check_ns);

/* Parse a CPU list like "2-18", "0,2,4-5" or "0-10:2" into cpus (up to max); returns count or -1. */
int wl_parse_cpulist(const char *spec, int *cpus, int max_cpus);
/* --idle-poll: one SCHED_IDLE spinner per CPU this process may use (idlepoll.c);
 * returns how many were started, or -1 (reported). */
int wl_idle_poll_start(void);
/* Pin the calling thread to cpu; a CPU this machine does not have is reported and skipped. */
int wl_pin_thread(int cpu, const char *who);
