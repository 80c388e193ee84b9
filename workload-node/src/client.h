/* client: shared state of wl-client. client.c parses options and runs the
 * pairs; pair.c is one sender/receiver thread pair. */
#pragma once
#include "ops.h"
#include "output.h"
#include "pacing.h"
#include "trace.h"

#include <pthread.h>
#include <semaphore.h>

struct client {
	struct wl_addr to;
	struct wl_workload wk;
	int npairs, ncpus, cpus[256];
	uint64_t nreq, nsessions, timeout_ns, seed;
	enum wl_pace_mode pace_mode;
	struct wl_value pace_value;
	uint64_t rss_ns;
	bool spin, busy_poll, nodelay, json, out_json;
	const char *out_path, *trace_path, *sample_spec;
	struct wl_trace *trace;
	uint64_t start_ns, rt_offset_ns;
	volatile int stop;
};

struct pair {
	struct client *cl;
	int index;
	pthread_t sender, receiver;
	struct wl_record *recs;
	uint8_t (*ids)[24]; /* trace id + span id per request, when tracing */
	uint64_t sent;      /* requests sent so far (atomic) */
	int64_t sess_end;   /* index where the current session's sending ended, or -1 */
	uint64_t lo, hi;
	int fd;
	bool finished;
	sem_t ready, done, window;
	struct wl_summary sum;
	struct wl_rng rng;
};

void *wl_sender_main(void *arg);
void *wl_receiver_main(void *arg);
