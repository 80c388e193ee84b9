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

#define WL_MAX_FLAGS 4

struct wl_value {
	enum wl_value_kind kind;
	enum wl_dist_kind dist;
	enum wl_unit unit;
	double constant;
	double avg, std;      /* distribution moments as given */
	double p1, p2;        /* derived parameters (lognorm mu/sigma, gamma shape/scale) */
	double min, max;      /* truncation bounds (also unif range, seq range) */
	double step;          /* seq increment (aseq) or factor (gseq) */
	bool geometric;
	uint64_t next_index;  /* seq/file position, shared by threads (atomic) */
	double *samples;      /* file column */
	size_t nsamples;
	char flags[WL_MAX_FLAGS][16]; /* bare words after the value, e.g. "sync" */
	int nflags;
};

/* spec examples: "10ms", "10k,sync", "unif:min=1k,max=10k", "exp:avg=5ms,max=50ms",
 * "aseq:min=2,max=100,step=2", "file:path=trace.csv,col=2". ',' and ':' both separate. */
int wl_value_parse(const char *spec, enum wl_unit unit, struct wl_value *v, const char *what);
void wl_value_const(struct wl_value *v, enum wl_unit unit, double constant);
double wl_value_next(struct wl_value *v, struct wl_rng *rng);
/* Term k of a sequence, clamped at its end (rate ramps); other kinds draw a sample. */
double wl_value_term(struct wl_value *v, uint64_t k, struct wl_rng *rng);
bool wl_value_has_flag(const struct wl_value *v, const char *flag);
void wl_value_free(struct wl_value *v);
