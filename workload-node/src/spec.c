/* spec: value specs as written on the command line, in DistWalk's syntax and
 * ours: a constant, a distribution (optionally truncated), an arithmetic or
 * geometric sequence, or a column of a trace file. Keys come from one table
 * that says which kinds take them; everything is checked here, so a value
 * that parses can always be drawn. */
#include "dist.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum slot { S_MIN, S_MAX, S_AVG, S_STD, S_STEP, S_K, S_SCALE, S_XAVG, S_XSTD, NSLOTS };
enum key_unit { KU_VALUE, KU_PLAIN, KU_STEP }; /* the value's unit; a plain number; a step (plain for gseq) */

#define K_DIST (1u << WL_VAL_DIST)
#define K_SEQ (1u << WL_VAL_SEQ)

static const struct key {
	const char *name;
	enum slot slot;
	enum key_unit unit;
	unsigned kinds; /* bit per enum wl_value_kind */
	const char *applies_to;
} keys[] = {
	{"min", S_MIN, KU_VALUE, K_DIST | K_SEQ, "distributions and sequences"},
	{"max", S_MAX, KU_VALUE, K_DIST | K_SEQ, "distributions and sequences"},
	{"avg", S_AVG, KU_VALUE, K_DIST | K_SEQ, "distributions and sequences (its start)"},
	{"mean", S_AVG, KU_VALUE, K_DIST | K_SEQ, "distributions and sequences (its start)"},
	{"std", S_STD, KU_VALUE, K_DIST, "norm, lognorm and gamma"},
	{"step", S_STEP, KU_STEP, K_SEQ, "aseq and gseq"},
	{"k", S_K, KU_PLAIN, K_DIST, "gamma"},
	{"scale", S_SCALE, KU_VALUE, K_DIST, "gamma"},
	{"xavg", S_XAVG, KU_PLAIN, K_DIST, "lognorm"},
	{"xval", S_XAVG, KU_PLAIN, K_DIST, "lognorm"},
	{"xstd", S_XSTD, KU_PLAIN, K_DIST, "lognorm"},
	{NULL, 0, 0, 0, NULL},
};

static const struct kind_name {
	const char *name;
	enum wl_value_kind kind;
	enum wl_dist_kind dist;
} kinds[] = {
	{"unif", WL_VAL_DIST, WL_DIST_UNIF}, {"exp", WL_VAL_DIST, WL_DIST_EXP},
	{"norm", WL_VAL_DIST, WL_DIST_NORM}, {"lognorm", WL_VAL_DIST, WL_DIST_LOGNORM},
	{"gamma", WL_VAL_DIST, WL_DIST_GAMMA}, {"aseq", WL_VAL_SEQ, 0}, {"gseq", WL_VAL_SEQ, 0},
	{"file", WL_VAL_FILE, 0}, {NULL, 0, 0},
};

/* What the tokens after the kind said. */
struct parsed {
	double x[NSLOTS];
	bool has[NSLOTS];
	const char *path, *sep, *scale_unit;
	long col;
	bool col_given, positional_path; /* DistWalk's file:PATH form counts columns from 0 */
};

/* Numbers in a spec; the message names the option and the whole spec. */
static int number(const char *text, enum wl_unit unit, double *out, const char *spec, const char *what)
{
	char inner[80];
	snprintf(inner, sizeof(inner), "%s '%s'", what, spec);
	return wl_parse_number(text, unit, out, inner);
}

static int set_slot(struct parsed *pz, enum slot s, double x, const char *name, const char *spec, const char *what)
{
	if (pz->has[s])
		return wl_err("%s: '%s': %s given twice", what, spec, name);
	pz->has[s] = true;
	pz->x[s] = x;
	return 0;
}

/* A word without '=': a file's path (DistWalk), or a distribution's average / a sequence's start. */
static int bare_word(const char *tok, struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	if (v->kind == WL_VAL_FILE && !pz->path) {
		pz->path = tok;
		pz->positional_path = true;
		return 0;
	}
	char *end;
	strtod(tok, &end);
	if (end == tok || v->kind == WL_VAL_CONST || v->kind == WL_VAL_FILE)
		return wl_err("%s: '%s': unexpected word '%s'", what, spec, tok);
	double x;
	if (number(tok, v->unit, &x, spec, what) < 0)
		return -1;
	return set_slot(pz, S_AVG, x, "the average (or start)", spec, what);
}

static int file_key(const char *key, const char *val, struct parsed *pz, const char *spec, const char *what)
{
	if (!strcmp(key, "path") || !strcmp(key, "file")) {
		pz->path = val;
	} else if (!strcmp(key, "col")) {
		char *end;
		errno = 0;
		pz->col = strtol(val, &end, 10);
		if (end == val || *end || errno || pz->col < 0 || pz->col > 1000000)
			return wl_err("%s: '%s': col= needs a column number, not '%s'", what, spec, val);
		pz->col_given = true;
	} else if (!strcmp(key, "sep")) {
		if (!*val)
			return wl_err("%s: '%s': sep= needs a separator character", what, spec);
		pz->sep = val;
	} else if (!strcmp(key, "unit")) {
		pz->scale_unit = val;
	} else {
		return 1; /* not a file key */
	}
	return 0;
}

static int token(char *tok, struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	char *eq = strchr(tok, '=');
	if (!eq)
		return bare_word(tok, v, pz, spec, what);
	*eq = '\0';
	const char *key = tok, *val = eq + 1;
	if (v->kind == WL_VAL_FILE) {
		int rc = file_key(key, val, pz, spec, what);
		if (rc <= 0)
			return rc;
	}
	const struct key *k = keys;
	while (k->name && strcmp(k->name, key))
		k++;
	if (!k->name)
		return wl_err("%s: '%s': unknown key '%s'", what, spec, key);
	if (!(k->kinds & (1u << v->kind)))
		return wl_err("%s: '%s': %s= applies to %s only", what, spec, key, k->applies_to);
	bool plain = k->unit == KU_PLAIN || (k->unit == KU_STEP && v->geometric);
	double x;
	if (number(val, plain ? WL_UNIT_RATIO : v->unit, &x, spec, what) < 0)
		return -1;
	return set_slot(pz, k->slot, x, key, spec, what);
}

/* DistWalk's alternative parameters: k and scale (gamma), xavg and xstd (lognorm). */
static int dist_moments(struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	bool alt_gamma = pz->has[S_K] || pz->has[S_SCALE], alt_log = pz->has[S_XAVG] || pz->has[S_XSTD];
	if ((alt_gamma && v->dist != WL_DIST_GAMMA) || (alt_log && v->dist != WL_DIST_LOGNORM))
		return wl_err("%s: '%s': k=/scale= are for gamma, xavg=/xstd= for lognorm", what, spec);
	if (alt_gamma) {
		if (!pz->has[S_K] || !pz->has[S_SCALE] || pz->x[S_K] <= 0 || pz->x[S_SCALE] <= 0)
			return wl_err("%s: '%s': gamma needs both k= > 0 and scale= > 0", what, spec);
		pz->x[S_AVG] = pz->x[S_K] * pz->x[S_SCALE];
		pz->x[S_STD] = sqrt(pz->x[S_K]) * pz->x[S_SCALE];
		pz->has[S_AVG] = pz->has[S_STD] = true;
	}
	if (alt_log) {
		if (!pz->has[S_XAVG] || !pz->has[S_XSTD] || pz->x[S_XSTD] <= 0)
			return wl_err("%s: '%s': lognorm needs both xavg= and xstd= > 0", what, spec);
		double m = pz->x[S_XAVG], s2 = pz->x[S_XSTD] * pz->x[S_XSTD];
		pz->x[S_AVG] = exp(m + s2 / 2.0);
		pz->x[S_STD] = sqrt((exp(s2) - 1.0) * exp(2.0 * m + s2));
		pz->has[S_AVG] = pz->has[S_STD] = true;
	}
	v->avg = pz->x[S_AVG];
	v->std = pz->x[S_STD];
	return 0;
}

static int finish_dist(struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	if (dist_moments(v, pz, spec, what) < 0)
		return -1;
	v->min = pz->has[S_MIN] ? pz->x[S_MIN] : 0; /* every quantity here is non-negative: truncate at 0 */
	v->max = pz->has[S_MAX] ? pz->x[S_MAX] : INFINITY;
	if (v->min > v->max)
		return wl_err("%s: '%s': min is above max", what, spec);
	bool has_avg = pz->has[S_AVG], has_std = pz->has[S_STD];
	switch (v->dist) {
	case WL_DIST_UNIF:
		if (!pz->has[S_MIN] || !pz->has[S_MAX] || has_avg || has_std)
			return wl_err("%s: '%s': unif needs min= and max= (and nothing else)", what, spec);
		break;
	case WL_DIST_EXP:
		if (!has_avg || v->avg <= 0 || has_std)
			return wl_err("%s: '%s': exp needs avg= > 0 (and no std=)", what, spec);
		break;
	case WL_DIST_NORM:
	case WL_DIST_LOGNORM:
	case WL_DIST_GAMMA:
		if (!has_avg || !has_std || v->avg <= 0 || v->std <= 0)
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

/* A sequence runs from its start to its end by step (aseq: +step, gseq: *step;
 * steps 1 and 2 by default). A rising step starts at min, a falling one at
 * max (DistWalk's ramp-down); min= above max= with a falling step is the
 * older way of writing a ramp-down, from min to max. A start value (bare
 * or avg=) may replace the bound the sequence starts from. */
static int finish_seq(struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	double step = pz->has[S_STEP] ? pz->x[S_STEP] : v->geometric ? 2.0 : 1.0;
	if (v->geometric ? step <= 0 || step == 1 : step == 0)
		return wl_err("%s: '%s': step would never reach max", what, spec);
	bool rising = v->geometric ? step > 1 : step > 0;
	bool has_min = pz->has[S_MIN], has_max = pz->has[S_MAX], has_start = pz->has[S_AVG];
	double lo = pz->x[S_MIN], hi = pz->x[S_MAX];
	if (has_min && has_max && lo > hi) {
		if (rising)
			return wl_err("%s: '%s': step moves away from max", what, spec);
		double t = lo;
		lo = hi;
		hi = t;
	}
	if (rising ? !has_max || (!has_min && !has_start) : !has_min || (!has_max && !has_start))
		return wl_err("%s: '%s': a sequence needs min= and max= (or a start value and the bound it moves to)",
			      what, spec);
	double start = has_start ? pz->x[S_AVG] : rising ? lo : hi, end = rising ? hi : lo;
	if (rising ? start > end : start < end)
		return wl_err("%s: '%s': the start is beyond the end of the sequence", what, spec);
	if (v->geometric && start <= 0)
		return wl_err("%s: '%s': a geometric sequence needs a start above 0", what, spec);
	v->min = start;
	v->max = end;
	v->step = step;
	return 0;
}

static int load_column(struct wl_value *v, const char *path, long col, const char *seps, double scale,
		       const char *what)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return wl_err("%s: open trace file %s: %s", what, path, strerror(errno));
	char line[4096], delims[64];
	snprintf(delims, sizeof(delims), "%s\r\n", seps);
	size_t cap = 0;
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *save, *field = strtok_r(line, delims, &save);
		for (long i = 1; field && i < col; i++)
			field = strtok_r(NULL, delims, &save);
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
		v->samples[v->nsamples++] = x * scale;
	}
	if (fclose(f) != 0 && rc == 0)
		rc = wl_err("%s: close %s: %s", what, path, strerror(errno));
	if (rc == 0 && v->nsamples == 0)
		rc = wl_err("%s: trace file %s has no values in column %ld", what, path, col);
	return rc;
}

/* path= counts columns from 1 (ours, documented); DistWalk's file:PATH form from 0. */
static int finish_file(struct wl_value *v, struct parsed *pz, const char *spec, const char *what)
{
	if (!pz->path)
		return wl_err("%s: '%s': file needs a path (file:PATH or file:path=PATH)", what, spec);
	long col = pz->positional_path ? (pz->col_given ? pz->col + 1 : 1) : (pz->col_given ? pz->col : 1);
	if (col < 1)
		return wl_err("%s: '%s': with path= columns count from 1", what, spec);
	double scale = 1;
	if (pz->scale_unit) {
		char one[32];
		snprintf(one, sizeof(one), "1%s", pz->scale_unit);
		if (number(one, v->unit, &scale, spec, what) < 0)
			return -1;
	}
	return load_column(v, pz->path, col, pz->sep ? pz->sep : ",;\t", scale, what);
}

int wl_value_parse(const char *spec, enum wl_unit unit, struct wl_value *v, const char *what)
{
	char copy[512], *save, *tok;
	*v = (struct wl_value){.unit = unit, .text = spec};
	if (strlen(spec) >= sizeof(copy))
		return wl_err("%s: value spec too long", what);
	strcpy(copy, spec);
	if (!(tok = strtok_r(copy, ",:", &save)))
		return wl_err("%s: empty value", what);
	const struct kind_name *kn = kinds;
	while (kn->name && strcmp(kn->name, tok))
		kn++;
	if (kn->name) {
		v->kind = kn->kind;
		v->dist = kn->dist;
		v->geometric = !strcmp(tok, "gseq");
	} else if (wl_parse_number(tok, unit, &v->constant, what) < 0) {
		return -1;
	}
	struct parsed pz = {.col = 0};
	while ((tok = strtok_r(NULL, ",:", &save)))
		if (token(tok, v, &pz, spec, what) < 0)
			return -1;
	switch (v->kind) {
	case WL_VAL_CONST:
		if (v->constant < 0)
			return wl_err("%s: '%s' is negative", what, spec);
		return 0;
	case WL_VAL_DIST:
		return finish_dist(v, &pz, spec, what);
	case WL_VAL_SEQ:
		return finish_seq(v, &pz, spec, what);
	case WL_VAL_FILE:
		return finish_file(v, &pz, spec, what);
	}
	return 0;
}
