/* output: per-request records (CSV or JSON lines) and the run summary. */
#pragma once
#include "stats.h"

#include <stdio.h>

#define WL_ST_UNSENT 255

struct wl_record {
	uint64_t send_ns; /* CLOCK_MONOTONIC at send; 0 if never sent */
	uint64_t latency_ns;
	uint8_t status; /* enum wl_status, or WL_ST_UNSENT */
	uint8_t done;
	uint16_t thread;
	uint32_t session;
	uint32_t late_ns; /* open loop: how long after its due time it went out (saturating) */
};

struct wl_summary {
	struct wl_hist hist; /* requests that got a reply, whatever its status */
	struct wl_hist late; /* open loop: send time minus due time, every request sent */
	uint64_t ok, timeout, err, unsent;
	uint64_t first_send_ns, last_done_ns;
};

void wl_summary_init(struct wl_summary *s);
void wl_summary_merge(struct wl_summary *into, const struct wl_summary *from);
void wl_summary_print(FILE *f, const struct wl_summary *s, bool json);
/* The --json object; extra: NULL, or more members, already JSON ("\"k\":\"v\""). */
void wl_summary_json(FILE *f, const struct wl_summary *s, const char *extra);

#define WL_RECORDS_CSV_HEADER "send_us,latency_us,status,thread,session\n"
#define WL_RECORD_LINE 160
/* One sent record as a line of the -o format (CSV or JSON), newline included;
 * its length. start_ns: the run's start, send times are relative to it. */
int wl_record_line(char line[WL_RECORD_LINE], const struct wl_record *r, bool json, uint64_t start_ns);
int wl_records_write(const char *path, bool json, const struct wl_record *const *recs, const uint64_t *counts,
		     int nthreads, uint64_t start_ns);
