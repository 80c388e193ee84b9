/* dist: xoshiro256** PRNG (seeded through splitmix64), distribution sampling
 * with truncation by rejection, and value specs. */
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

double wl_value_term(struct wl_value *v, uint64_t k, struct wl_rng *rng)
{
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
		double span = v->geometric ? log(v->max / v->min) / log(v->step) : (v->max - v->min) / v->step;
		uint64_t terms = (uint64_t)floor(span + 1e-9) + 1;
		return wl_value_term(v, k % terms, rng);
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

void wl_value_const(struct wl_value *v, enum wl_unit unit, double constant)
{
	*v = (struct wl_value){.kind = WL_VAL_CONST, .unit = unit, .constant = constant};
}

bool wl_value_has_flag(const struct wl_value *v, const char *flag)
{
	for (int i = 0; i < v->nflags; i++)
		if (strcmp(v->flags[i], flag) == 0)
			return true;
	return false;
}

void wl_value_free(struct wl_value *v)
{
	free(v->samples);
	v->samples = NULL;
}

static int load_column(struct wl_value *v, const char *path, long col, const char *what)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return wl_err("%s: open trace file %s: %s", what, path, strerror(errno));
	char line[4096];
	size_t cap = 0;
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *save, *field = strtok_r(line, ",;\t\n", &save);
		for (long i = 1; field && i < col; i++)
			field = strtok_r(NULL, ",;\t\n", &save);
		double x;
		char *end;
		if (!field || (x = strtod(field, &end), end == field)) {
			if (lineno == 1)
				continue; /* a header row */
			rc = wl_err("%s: %s:%d: column %ld is missing or not a number", what, path, lineno, col);
			break;
		}
		if (wl_grow(&v->samples, &cap, v->nsamples, sizeof(*v->samples), 1024) < 0) {
			rc = wl_err("%s: out of memory reading %s", what, path);
			break;
		}
		v->samples[v->nsamples++] = x;
	}
	if (fclose(f) != 0 && rc == 0)
		rc = wl_err("%s: close %s: %s", what, path, strerror(errno));
	if (rc == 0 && v->nsamples == 0)
		rc = wl_err("%s: trace file %s has no values in column %ld", what, path, col);
	return rc;
}

struct dist_name {
	const char *name;
	enum wl_value_kind kind;
	enum wl_dist_kind dist;
};

static const struct dist_name dist_names[] = {
	{"unif", WL_VAL_DIST, WL_DIST_UNIF}, {"exp", WL_VAL_DIST, WL_DIST_EXP},
	{"norm", WL_VAL_DIST, WL_DIST_NORM}, {"lognorm", WL_VAL_DIST, WL_DIST_LOGNORM},
	{"gamma", WL_VAL_DIST, WL_DIST_GAMMA}, {"aseq", WL_VAL_SEQ, 0}, {"gseq", WL_VAL_SEQ, 0},
	{"file", WL_VAL_FILE, 0}, {NULL, 0, 0},
};

static int finish_dist(struct wl_value *v, bool has[4], const char *spec, const char *what)
{
	enum { MIN, MAX, AVG, STD };
	if (!has[MIN])
		v->min = 0; /* every quantity here is non-negative: truncate at 0 */
	if (!has[MAX])
		v->max = INFINITY;
	if (v->min > v->max)
		return wl_err("%s: '%s': min is above max", what, spec);
	switch (v->dist) {
	case WL_DIST_UNIF:
		if (!has[MIN] || !has[MAX])
			return wl_err("%s: '%s': unif needs min= and max=", what, spec);
		break;
	case WL_DIST_EXP:
		if (!has[AVG] || v->avg <= 0)
			return wl_err("%s: '%s': exp needs avg= > 0", what, spec);
		break;
	case WL_DIST_NORM:
	case WL_DIST_LOGNORM:
	case WL_DIST_GAMMA:
		if (!has[AVG] || !has[STD] || v->avg <= 0 || v->std <= 0)
			return wl_err("%s: '%s': needs avg= > 0 and std= > 0", what, spec);
		break;
	}
	if (v->dist == WL_DIST_LOGNORM) { /* avg/std are of the variable, not of its log */
		v->p2 = sqrt(log(1.0 + v->std * v->std / (v->avg * v->avg)));
		v->p1 = log(v->avg) - v->p2 * v->p2 / 2.0;
	} else if (v->dist == WL_DIST_GAMMA) {
		v->p1 = v->avg * v->avg / (v->std * v->std);
		v->p2 = v->std * v->std / v->avg;
	}
	return 0;
}

int wl_value_parse(const char *spec, enum wl_unit unit, struct wl_value *v, const char *what)
{
	char copy[512], *save, *tok;
	if (strlen(spec) >= sizeof(copy))
		return wl_err("%s: value spec too long", what);
	strcpy(copy, spec);
	*v = (struct wl_value){.unit = unit};
	tok = strtok_r(copy, ",:", &save);
	if (!tok)
		return wl_err("%s: empty value", what);
	const struct dist_name *dn = NULL;
	for (const struct dist_name *d = dist_names; d->name; d++)
		if (strcmp(tok, d->name) == 0)
			dn = d;
	if (dn) {
		v->kind = dn->kind;
		v->dist = dn->dist;
		v->geometric = strcmp(tok, "gseq") == 0;
	} else if (wl_parse_number(tok, unit, &v->constant, what) < 0) {
		return -1;
	}
	bool has[4] = {0}, has_step = false;
	const char *path = NULL;
	long col = 1;
	while ((tok = strtok_r(NULL, ",:", &save))) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			if (v->nflags == WL_MAX_FLAGS || strlen(tok) >= sizeof(v->flags[0]))
				return wl_err("%s: '%s': unexpected word '%s'", what, spec, tok);
			strcpy(v->flags[v->nflags++], tok);
			continue;
		}
		*eq = '\0';
		const char *key = tok, *val = eq + 1;
		double *dst = NULL;
		enum wl_unit u = unit;
		if (!strcmp(key, "min")) { dst = &v->min; has[0] = true; }
		else if (!strcmp(key, "max")) { dst = &v->max; has[1] = true; }
		else if (!strcmp(key, "avg") || !strcmp(key, "mean")) { dst = &v->avg; has[2] = true; }
		else if (!strcmp(key, "std")) { dst = &v->std; has[3] = true; }
		else if (!strcmp(key, "step")) { dst = &v->step; has_step = true; u = v->geometric ? WL_UNIT_RATIO : unit; }
		else if (!strcmp(key, "path") || !strcmp(key, "file")) { path = val; continue; }
		else if (!strcmp(key, "col")) { col = strtol(val, NULL, 10); continue; }
		else
			return wl_err("%s: '%s': unknown key '%s'", what, spec, key);
		if (wl_parse_number(val, u, dst, what) < 0)
			return -1;
	}
	switch (v->kind) {
	case WL_VAL_CONST:
		if (v->constant < 0)
			return wl_err("%s: '%s' is negative", what, spec);
		return 0;
	case WL_VAL_DIST:
		return finish_dist(v, has, spec, what);
	case WL_VAL_SEQ:
		if (!has[0] || !has[1] || !has_step)
			return wl_err("%s: '%s': a sequence needs min=, max= and step=", what, spec);
		if (v->geometric ? (v->step <= 0 || v->step == 1 || v->min <= 0) : v->step == 0)
			return wl_err("%s: '%s': step would never reach max", what, spec);
		if ((v->max - v->min) * (v->geometric ? log(v->step) : v->step) < 0)
			return wl_err("%s: '%s': step moves away from max", what, spec);
		return 0;
	case WL_VAL_FILE:
		if (!path || col < 1)
			return wl_err("%s: '%s': file needs path= and col= (1-based)", what, spec);
		return load_column(v, path, col, what);
	}
	return 0;
}
