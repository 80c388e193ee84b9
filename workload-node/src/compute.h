/* compute: the COMPUTE op's three ways to be busy (compute.c says which).
 * node.c calibrates the loop at start-up, job.c runs each COMPUTE. */
#pragma once
#include "wire.h"

struct wl_worker;

void wl_compute_calibrate(void);
void wl_compute_loops(double loops_per_us); /* --loops-per-usec (after calibrating, when 0) */
void wl_compute(struct wl_worker *w, const struct wl_op *op);
