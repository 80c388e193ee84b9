/* pacing: open-loop schedules with absolute sleeps. */
#include "pacing.h"

#include <errno.h>
#include <math.h>
#include <time.h>

void wl_pace_init(struct wl_pace *p, enum wl_pace_mode mode, struct wl_value *value, uint64_t step_ns, bool spin)
{
	*p = (struct wl_pace){.mode = mode, .value = value, .step_ns = step_ns ? step_ns : 1000000000ull, .spin = spin};
}

/* Rate of step k; a drawn rate at or below 1 request per hour idles the step. */
static double step_rate(struct wl_pace *p, struct wl_rng *rng)
{
	double r = wl_value_term(p->value, p->step, rng);
	return r < 1.0 / 3600 ? 0 : r;
}

/* Request i of a step is due i / rate after the step's start. */
static uint64_t due_in_step(uint64_t i, double rate) { return (uint64_t)((double)i * 1e9 / rate); }

uint64_t wl_pace_step_count(double rate, uint64_t step_ns)
{
	if (rate < 1.0 / 3600)
		return 0;
	uint64_t n = (uint64_t)ceil(rate * (double)step_ns / 1e9);
	while (n > 0 && due_in_step(n - 1, rate) >= step_ns)
		n--;
	while (due_in_step(n, rate) < step_ns)
		n++;
	return n;
}

uint64_t wl_pace_mean_period_ns(const struct wl_pace *p)
{
	double mean = wl_value_mean(p->value);
	if (mean <= 0)
		return 0;
	return (uint64_t)(p->mode == WL_PACE_RATE ? 1e9 / mean : mean * 1000.0);
}

uint64_t wl_pace_next(struct wl_pace *p, uint64_t start_ns, struct wl_rng *rng)
{
	start_ns += p->offset_ns;
	switch (p->mode) {
	case WL_PACE_CLOSED: { /* the first request waits for the common start, like an open-loop one */
		uint64_t now = wl_now_ns();
		return now < start_ns ? start_ns : now;
	}
	case WL_PACE_PERIOD:
		if (!p->started) {
			p->started = true;
			p->next_ns = start_ns;
		} else {
			p->next_ns += (uint64_t)(wl_value_next(p->value, rng) * 1000.0);
		}
		return p->next_ns;
	case WL_PACE_RATE:
		/* Times are start + i / rate within a step, not a running sum, so
		 * rounding never squeezes an extra request into a step. */
		if (!p->started) {
			p->started = true;
			p->step = 0;
			p->rate = step_rate(p, rng);
			p->step_start_ns = start_ns;
			p->in_step = 0;
		} else {
			p->in_step++;
		}
		for (;;) {
			p->step_end_ns = p->step_start_ns + p->step_ns;
			if (p->rate > 0) {
				p->next_ns = p->step_start_ns + due_in_step(p->in_step, p->rate);
				if (p->next_ns < p->step_end_ns)
					return p->next_ns;
			}
			p->step_start_ns = p->step_end_ns;
			p->step++;
			p->in_step = 0;
			p->rate = step_rate(p, rng);
		}
	}
	return wl_now_ns();
}

void wl_sleep_until(uint64_t t_ns, bool spin)
{
	if (spin) {
		while (wl_now_ns() < t_ns)
			;
		return;
	}
	struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u), .tv_nsec = (long)(t_ns % 1000000000u)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}
