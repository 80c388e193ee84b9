/* idlepoll: --idle-poll, a lowest-priority spinner on each CPU.
 *
 * An idle CPU halts; waking it costs microseconds, and inside a VM (whose
 * halted virtual CPU exits to the host and must be scheduled again) far more.
 * Every request of the default mode pays such wake-ups: the node's worker
 * when the request arrives, the client's receiver when the reply does.  The
 * kernel's idle=poll keeps CPUs spinning instead of halting; this is the
 * same from user space, for machines whose command line one cannot change.
 * Each spinner is SCHED_IDLE, so any runnable thread preempts it at once; the
 * price is that the CPUs show 100% busy and draw power.  Measured with
 * bench/workload_bench.py (see its doc). */
#include "util.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static void *spin(void *arg)
{
	int cpu = (int)(intptr_t)arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		return NULL; /* a CPU we may not use: nothing to keep awake there */
	struct sched_param none = {.sched_priority = 0};
	if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0)
		return NULL; /* never spin at normal priority: it would steal the workers' CPU */
	for (;;) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#elif defined(__aarch64__)
		__asm__ volatile("yield");
#endif
	}
	return NULL;
}

int wl_idle_poll_start(void)
{
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return wl_err("--idle-poll: cannot read this process's CPUs");
	/* The spinners must never take a signal meant for the main thread. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int started = 0, rc = 0;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		pthread_t t;
		int err = pthread_create(&t, &attr, spin, (void *)(intptr_t)cpu);
		if (err) {
			rc = wl_err("--idle-poll: cannot start a spinner for cpu %d: %s", cpu, strerror(err));
			break;
		}
		started++;
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc < 0 ? rc : started;
}
