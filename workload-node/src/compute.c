/* compute: the COMPUTE op's three ways to be busy. Thread CPU time (the
 * default) stretches in wall time under contention like real work would;
 * wall time spins on the clock; a calibrated loop runs a fixed amount of
 * arithmetic, measured once at start-up, so that a slower or shared CPU
 * makes it take longer, as the same code would. */
#include "compute.h"

#include <stdio.h>

static double iterations_per_ns;
static bool loop_all; /* --loops-per-usec: every COMPUTE that is not wall time runs the loop */
static volatile uint64_t sink; /* keeps the loop from being optimized away */

static uint64_t spin(uint64_t iterations)
{
	uint64_t x = 88172645463325252ull;
	for (uint64_t i = 0; i < iterations; i++) { /* xorshift: cheap, not foldable */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

void wl_compute_calibrate(void)
{
	/* The best of many 100 us trials over 50 ms: preemption only ever makes
	 * a trial slower, and under a CPU quota (cpu-speed, cpus) a trial this
	 * short fits in the kernel's smallest quota, 1 ms, so some trials run
	 * unthrottled and the loop is calibrated at the core's full speed, which
	 * is what lets a quota stretch it. 50 ms lets the CPU's clock ramp up. */
	uint64_t n = 10000, start = wl_now_ns();
	double best = 0;
	for (int trial = 0; trial < 20 || wl_now_ns() - start < 50000000; trial++) {
		uint64_t t0 = wl_now_ns();
		sink = spin(n);
		uint64_t dt = wl_now_ns() - t0;
		double rate = (double)n / (double)(dt ? dt : 1);
		if (rate > best)
			best = rate;
		n = (uint64_t)(best * 100e3) + 1;
	}
	iterations_per_ns = best;
	fprintf(stderr, "wl-node: calibrated loop: %.1f iterations/us\n", best * 1e3);
}

void wl_compute_loops(double loops_per_us)
{
	if (loops_per_us < 0)
		return;
	loop_all = true;
	if (loops_per_us > 0)
		iterations_per_ns = loops_per_us / 1e3;
	fprintf(stderr, "wl-node: every COMPUTE runs a loop of %.1f iterations/us\n", iterations_per_ns * 1e3);
}

void wl_compute(const struct wl_op *op, const volatile int *stop)
{
	/* Nothing to burn: skip the clock reads (thread CPU time is a system
	 * call, not a vDSO read: two of them would double a -C 0 request's cost). */
	if (op->compute.ns == 0)
		return;
	if ((op->flags & WL_COMPUTE_LOOP) || (loop_all && !(op->flags & WL_COMPUTE_WALL))) {
		sink = spin((uint64_t)((double)op->compute.ns * iterations_per_ns));
		return;
	}
	bool wall = op->flags & WL_COMPUTE_WALL;
	uint64_t (*clock)(void) = wall ? wl_now_ns : wl_thread_cpu_ns;
	uint64_t end = clock() + op->compute.ns;
	/* A shutdown request cuts a long compute short. */
	while (clock() < end && !__atomic_load_n(stop, __ATOMIC_RELAXED))
		;
}
