/* dist: a seeded PRNG, distributions, and "values": the things an option
 * like -C, -S, -r or --store-offset holds (constant, distribution, arithmetic
 * or geometric sequence, or a column of a CSV trace file). */
#pragma once
#include "units.h"

struct wl_rng {
	uint64_t s[4];
};

void wl_rng_seed(struct wl_rng *rng, uint64_t seed);
uint64_t wl_rng_u64(struct wl_rng *rng);
double wl_rng_unit(struct wl_rng *rng); /* uniform in [0, 1) */

enum wl_value_kind { WL_VAL_CONST, WL_VAL_DIST, WL_VAL_SEQ, WL_VAL_FILE };
enum wl_dist_kind { WL_DIST_UNIF, WL_DIST_EXP, WL_DIST_NORM, WL_DIST_LOGNORM, WL_DIST_GAMMA };

struct wl_value {
	enum wl_value_kind kind;
	enum wl_dist_kind dist;
	enum wl_unit unit;
	double constant;
	double avg, std;      /* distribution moments as given */
	double p1, p2;        /* derived parameters (lognorm mu/sigma, gamma shape/scale) */
	double min, max;      /* truncation bounds and unif range; a sequence's first and last term */
	double step;          /* seq increment (aseq) or factor (gseq) */
	bool geometric;
	uint64_t next_index;  /* seq/file position, shared by threads (atomic) */
	double *samples;      /* file column */
	size_t nsamples;
	const char *text;     /* the spec as written (not owned: it outlives the value) */
};

/* spec.c. Both DistWalk's syntax and ours, ':' and ',' both separate:
 * "10ms", "exp:5ms", "exp:avg=5ms,max=50ms", "norm:20:std=5", "unif:min=1k,max=10k",
 * "lognorm:xavg=3:xstd=1", "gamma:k=2:scale=2", "aseq:min=2,max=100,step=2",
 * "aseq:1000:max=2000" (start, step 1), "gseq:min=1:max=16" (step 2),
 * "file:path=trace.csv,col=2" (col 1-based), "file:trace.csv,col=1,sep=;,unit=ms"
 * (DistWalk's form: col 0-based). spec must outlive v (v->text points to it). */
int wl_value_parse(const char *spec, enum wl_unit unit, struct wl_value *v, const char *what);
void wl_value_const(struct wl_value *v, enum wl_unit unit, double constant);
double wl_value_next(struct wl_value *v, struct wl_rng *rng);
/* Term k of a sequence, clamped at its end (rate ramps), or of a trace column
 * (cycling); other kinds draw a sample. */
double wl_value_term(struct wl_value *v, uint64_t k, struct wl_rng *rng);
uint64_t wl_value_terms(const struct wl_value *v); /* a sequence's or column's length; 0 for others */
double wl_value_mean(const struct wl_value *v); /* the untruncated mean (a sequence: its first term) */
void wl_value_free(struct wl_value *v);
