/* stats: a mergeable log-linear latency histogram (relative error < 1/128).
 * Each client thread owns one; they are merged after join. */
#pragma once
#include "util.h"

#define WL_HIST_SUB_BITS 7
#define WL_HIST_SUB (1u << WL_HIST_SUB_BITS)
#define WL_HIST_BUCKETS (WL_HIST_SUB * 58u)

struct wl_hist {
	uint64_t count, sum, min, max;
	uint64_t buckets[WL_HIST_BUCKETS];
};

void wl_hist_init(struct wl_hist *h);
void wl_hist_add(struct wl_hist *h, uint64_t value);
void wl_hist_merge(struct wl_hist *into, const struct wl_hist *from);
uint64_t wl_hist_quantile(const struct wl_hist *h, double q); /* q in [0, 1] */
double wl_hist_mean(const struct wl_hist *h);
