/* units: table-driven suffix parsing. */
#include "units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct suffix {
	const char *text;
	double factor;
};

static const struct suffix count_suffixes[] = {
	{"", 1}, {"k", 1e3}, {"K", 1e3}, {"m", 1e6}, {"M", 1e6}, {"g", 1e9}, {"G", 1e9}, {NULL, 0},
};
static const struct suffix byte_suffixes[] = {
	{"", 1}, {"b", 1}, {"B", 1}, {"k", 1024.0}, {"K", 1024.0}, {"kb", 1024.0}, {"KB", 1024.0},
	{"m", 1048576.0}, {"M", 1048576.0}, {"mb", 1048576.0}, {"MB", 1048576.0},
	{"g", 1073741824.0}, {"G", 1073741824.0}, {"gb", 1073741824.0}, {"GB", 1073741824.0}, {NULL, 0},
};
/* DistWalk reads a bare time as microseconds, and "1k" as 1000 us (-C unif:min=1k,max=10k). */
static const struct suffix time_suffixes[] = {
	{"", 1}, {"ns", 1e-3}, {"us", 1}, {"ms", 1e3}, {"s", 1e6},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {NULL, 0},
};
static const struct suffix ratio_suffixes[] = {
	{"", 1}, {"%", 0.01}, {NULL, 0},
};

static const struct suffix *tables[] = {
	[WL_UNIT_COUNT] = count_suffixes, [WL_UNIT_BYTES] = byte_suffixes,
	[WL_UNIT_TIME] = time_suffixes, [WL_UNIT_RATIO] = ratio_suffixes,
};

const char *wl_unit_name(enum wl_unit unit)
{
	static const char *names[] = {
		[WL_UNIT_COUNT] = "a count (k/m/g)", [WL_UNIT_BYTES] = "a size in bytes (k/m/g)",
		[WL_UNIT_TIME] = "a time (ns/us/ms/s, bare = us)", [WL_UNIT_RATIO] = "a ratio (0.3 or 30%)",
	};
	return names[unit];
}

int wl_parse_number(const char *text, enum wl_unit unit, double *out, const char *what)
{
	char *end;
	double v = strtod(text, &end);
	if (end == text || !isfinite(v))
		return wl_err("%s: '%s' is not %s", what, text, wl_unit_name(unit));
	for (const struct suffix *s = tables[unit]; s->text; s++) {
		if (strcmp(end, s->text) == 0) {
			*out = v * s->factor;
			return 0;
		}
	}
	return wl_err("%s: '%s' has an unknown suffix '%s'; expected %s", what, text, end, wl_unit_name(unit));
}
