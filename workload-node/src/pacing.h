/* pacing: when each request is due. Open loop: send times follow the rate
 * or period schedule regardless of replies, so a slow node cannot slow the
 * offered load down and hide its own latency (coordinated omission). With a
 * rate ramp, step k lasts --rss and its first request is due exactly at the
 * step's start, so each step offers rate_k * rss requests. */
#pragma once
#include "dist.h"

enum wl_pace_mode { WL_PACE_CLOSED, WL_PACE_PERIOD, WL_PACE_RATE };

struct wl_pace {
	enum wl_pace_mode mode;
	struct wl_value *value; /* period (us) or rate (req/s) */
	uint64_t step_ns;       /* rate step duration (--rss) */
	uint64_t next_ns, step_start_ns, step_end_ns, step, in_step; /* in_step: index within the step */
	double rate;
	bool started, spin;
	uint64_t offset_ns; /* --stag-send: this pair's schedule starts this late */
};

void wl_pace_init(struct wl_pace *p, enum wl_pace_mode mode, struct wl_value *value, uint64_t step_ns, bool spin);
/* Absolute CLOCK_MONOTONIC time the next request is due (closed loop: now, not before start_ns). */
uint64_t wl_pace_next(struct wl_pace *p, uint64_t start_ns, struct wl_rng *rng);
/* The mean time between requests (the first term of a ramp), for --stag-send. */
uint64_t wl_pace_mean_period_ns(const struct wl_pace *p);
/* How many requests a rate step of step_ns offers at rate (what wl_pace_next schedules). */
uint64_t wl_pace_step_count(double rate, uint64_t step_ns);
/* Sleep until t with an absolute clock_nanosleep, or spin when p->spin. */
void wl_sleep_until(uint64_t t_ns, bool spin);
