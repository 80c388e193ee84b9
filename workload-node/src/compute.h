/* compute: the COMPUTE op's three ways to be busy (compute.c says which).
 * node.c calibrates the loop at start-up, job.c runs each COMPUTE. Calls
 * nothing of wl-node's. */
#pragma once
#include "wire.h"

void wl_compute_calibrate(void);
void wl_compute_loops(double loops_per_us); /* --loops-per-usec (after calibrating, when 0) */
/* Busy for op's time; a stop set meanwhile (the node shutting down) cuts it short. */
void wl_compute(const struct wl_op *op, const volatile int *stop);
