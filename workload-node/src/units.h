/* units: numbers with suffixes, parsed from tables. Internal base units:
 * time in microseconds (DistWalk's unit for a bare number), bytes, counts. */
#pragma once
#include "util.h"

enum wl_unit {
	WL_UNIT_COUNT, /* k/m/g = 1e3/1e6/1e9 */
	WL_UNIT_BYTES, /* k/m/g = KiB/MiB/GiB */
	WL_UNIT_TIME,  /* bare = us; ns/us/ms/s; k/m/g multiply microseconds */
	WL_UNIT_RATIO, /* plain number or a percentage ("30%") */
};

/* Parse one number in unit; returns 0 and *out in base units, or -1 with a message naming what. */
int wl_parse_number(const char *text, enum wl_unit unit, double *out, const char *what);
const char *wl_unit_name(enum wl_unit unit);
