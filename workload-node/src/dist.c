/* dist: xoshiro256** PRNG (seeded through splitmix64), distribution sampling
 * with truncation by rejection, sequences and trace columns (spec.c parses them). */
#include "dist.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void wl_rng_seed(struct wl_rng *rng, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		rng->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t wl_rng_u64(struct wl_rng *rng)
{
	uint64_t *s = rng->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double wl_rng_unit(struct wl_rng *rng) { return (double)(wl_rng_u64(rng) >> 11) * 0x1.0p-53; }

static double normal(struct wl_rng *rng)
{
	double u1 = 1.0 - wl_rng_unit(rng), u2 = wl_rng_unit(rng); /* u1 in (0, 1] */
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia-Tsang; shape < 1 uses the boost x * U^(1/shape). */
static double gamma_draw(struct wl_rng *rng, double shape)
{
	if (shape < 1.0)
		return gamma_draw(rng, shape + 1.0) * pow(1.0 - wl_rng_unit(rng), 1.0 / shape);
	double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = normal(rng), v = 1.0 + c * x;
		if (v <= 0)
			continue;
		v = v * v * v;
		double u = 1.0 - wl_rng_unit(rng);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v;
	}
}

static double dist_draw(const struct wl_value *v, struct wl_rng *rng)
{
	switch (v->dist) {
	case WL_DIST_UNIF: return v->min + (v->max - v->min) * wl_rng_unit(rng);
	case WL_DIST_EXP: return -v->avg * log(1.0 - wl_rng_unit(rng));
	case WL_DIST_NORM: return v->avg + v->std * normal(rng);
	case WL_DIST_LOGNORM: return exp(v->p1 + v->p2 * normal(rng));
	case WL_DIST_GAMMA: return gamma_draw(rng, v->p1) * v->p2;
	}
	return 0;
}

uint64_t wl_value_terms(const struct wl_value *v)
{
	if (v->kind == WL_VAL_FILE)
		return v->nsamples;
	if (v->kind != WL_VAL_SEQ)
		return 0;
	double span = v->geometric ? log(v->max / v->min) / log(v->step) : (v->max - v->min) / v->step;
	return (uint64_t)floor(span + 1e-9) + 1;
}

double wl_value_term(struct wl_value *v, uint64_t k, struct wl_rng *rng)
{
	if (v->kind == WL_VAL_FILE)
		return v->samples[k % v->nsamples];
	if (v->kind != WL_VAL_SEQ)
		return wl_value_next(v, rng);
	double t = v->geometric ? v->min * pow(v->step, (double)k) : v->min + v->step * (double)k;
	bool rising = v->geometric ? v->step >= 1 : v->step >= 0;
	if (rising ? t > v->max : t < v->max)
		t = v->max;
	return t;
}

double wl_value_next(struct wl_value *v, struct wl_rng *rng)
{
	switch (v->kind) {
	case WL_VAL_CONST:
		return v->constant;
	case WL_VAL_FILE:
		return v->samples[__atomic_fetch_add(&v->next_index, 1, __ATOMIC_RELAXED) % v->nsamples];
	case WL_VAL_SEQ: {
		/* As a per-request value (e.g. sequential offsets) a sequence wraps to its start. */
		uint64_t k = __atomic_fetch_add(&v->next_index, 1, __ATOMIC_RELAXED);
		return wl_value_term(v, k % wl_value_terms(v), rng);
	}
	case WL_VAL_DIST:
		/* Truncation is rejection sampling: the conditional distribution, not a clamp. */
		for (int tries = 0; tries < 1000000; tries++) {
			double x = dist_draw(v, rng);
			if (x >= v->min && x <= v->max)
				return x;
		}
		return v->min; /* unreachable for bounds checked at parse time */
	}
	return 0;
}

double wl_value_mean(const struct wl_value *v)
{
	switch (v->kind) {
	case WL_VAL_CONST: return v->constant;
	case WL_VAL_DIST: return v->dist == WL_DIST_UNIF ? (v->min + v->max) / 2 : v->avg;
	case WL_VAL_SEQ: return v->min; /* its first term */
	case WL_VAL_FILE: return v->samples[0];
	}
	return 0;
}

void wl_value_const(struct wl_value *v, enum wl_unit unit, double constant)
{
	*v = (struct wl_value){.kind = WL_VAL_CONST, .unit = unit, .constant = constant};
}

void wl_value_free(struct wl_value *v)
{
	free(v->samples);
	v->samples = NULL;
}

