/* stats: values below WL_HIST_SUB are exact; above, each power of two is
 * split into WL_HIST_SUB equal buckets, so the error is relative. */
#include "stats.h"

#include <string.h>

void wl_hist_init(struct wl_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

static unsigned bucket_of(uint64_t v)
{
	if (v < WL_HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - WL_HIST_SUB_BITS;
	unsigned idx = (shift + 1) * WL_HIST_SUB + (unsigned)((v >> shift) & (WL_HIST_SUB - 1));
	return idx < WL_HIST_BUCKETS ? idx : WL_HIST_BUCKETS - 1;
}

/* Midpoint of the bucket, the estimate with the smallest worst-case error. */
static uint64_t bucket_value(unsigned idx)
{
	if (idx < WL_HIST_SUB)
		return idx;
	unsigned shift = idx / WL_HIST_SUB - 1;
	uint64_t low = (uint64_t)(WL_HIST_SUB + idx % WL_HIST_SUB) << shift;
	return low + ((1ull << shift) >> 1);
}

void wl_hist_add(struct wl_hist *h, uint64_t value)
{
	h->buckets[bucket_of(value)]++;
	h->count++;
	h->sum += value;
	if (value < h->min)
		h->min = value;
	if (value > h->max)
		h->max = value;
}

void wl_hist_merge(struct wl_hist *into, const struct wl_hist *from)
{
	for (unsigned i = 0; i < WL_HIST_BUCKETS; i++)
		into->buckets[i] += from->buckets[i];
	into->count += from->count;
	into->sum += from->sum;
	if (from->min < into->min)
		into->min = from->min;
	if (from->max > into->max)
		into->max = from->max;
}

uint64_t wl_hist_quantile(const struct wl_hist *h, double q)
{
	if (h->count == 0)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)h->count + 0.5), seen = 0;
	if (rank < 1)
		rank = 1;
	if (rank >= h->count)
		return h->max;
	for (unsigned i = 0; i < WL_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank) {
			uint64_t v = bucket_value(i);
			return v < h->min ? h->min : v > h->max ? h->max : v;
		}
	}
	return h->max;
}

double wl_hist_mean(const struct wl_hist *h) { return h->count ? (double)h->sum / (double)h->count : 0.0; }
