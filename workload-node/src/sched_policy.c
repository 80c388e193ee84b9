/* sched_policy: the workers' scheduling policy (--sched): parsed and
 * checked when the options are read, applied by each worker thread to
 * itself. */
#include "sched_policy.h"
#include "units.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WL_SCHED_DEADLINE_POLICY 6 /* SCHED_DEADLINE; older libc headers lack it */

struct sched_attr_dl { /* the kernel's struct sched_attr (version 0); glibc has no wrapper */
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
};

static int parse_int(const char *text, int lo, int hi, const char *spec, int *out)
{
	char *end;
	long v = strtol(text, &end, 10);
	if (end == text || *end || v < lo || v > hi)
		return wl_err("--sched '%s': '%s' is not a whole number within %d..%d", spec, text, lo, hi);
	*out = (int)v;
	return 0;
}

/* RUNTIME,DEADLINE,PERIOD: times (a bare number is us), 1us <= runtime <= deadline <= period.
 * DistWalk's dl:RUNTIME,DEADLINE takes the period equal to the deadline. */
static int parse_deadline(char *args, const char *spec, bool dl, struct wl_sched *out)
{
	uint64_t ns[3];
	char *save = NULL, *part = strtok_r(args, ",", &save);
	for (int i = 0; i < 3; i++, part = strtok_r(NULL, ",", &save)) {
		double us;
		if (!part && dl && i == 2) {
			ns[2] = ns[1];
			break;
		}
		if (!part)
			return wl_err("--sched '%s': %s", spec, dl ? "dl needs RUNTIME,DEADLINE[,PERIOD]"
							       : "deadline needs RUNTIME,DEADLINE,PERIOD");
		if (wl_parse_number(part, WL_UNIT_TIME, &us, "--sched deadline") < 0)
			return -1;
		ns[i] = (uint64_t)(us * 1000.0);
	}
	if (part)
		return wl_err("--sched '%s': deadline takes exactly RUNTIME,DEADLINE,PERIOD", spec);
	/* The kernel's own rules (sched_setattr would say EINVAL): */
	if (ns[0] < 1024 || ns[0] > ns[1] || ns[1] > ns[2])
		return wl_err("--sched '%s': expected 1us <= RUNTIME <= DEADLINE <= PERIOD", spec);
	out->policy = WL_SCHED_DEADLINE;
	out->runtime_ns = ns[0];
	out->deadline_ns = ns[1];
	out->period_ns = ns[2];
	return 0;
}

int wl_sched_parse(const char *spec, struct wl_sched *out)
{
	char buf[96];
	memset(out, 0, sizeof(*out));
	if (!strcmp(spec, "other")) { /* DistWalk: the default policy, at nice 0 */
		out->policy = WL_SCHED_OTHER;
		return 0;
	}
	if (strlen(spec) >= sizeof(buf) || !strchr(spec, ':'))
		return wl_err("--sched '%s': expected other:NICE, rr:PRIO, fifo:PRIO or deadline:RUNTIME,DEADLINE,PERIOD",
			      spec);
	strcpy(buf, spec);
	char *args = strchr(buf, ':');
	*args++ = '\0';
	if (!strcmp(buf, "other")) {
		out->policy = WL_SCHED_OTHER;
		return parse_int(args, -20, 19, spec, &out->value);
	}
	if (!strcmp(buf, "rr") || !strcmp(buf, "fifo")) {
		out->policy = buf[0] == 'r' ? WL_SCHED_RR : WL_SCHED_FIFO;
		return parse_int(args, 1, 99, spec, &out->value);
	}
	if (!strcmp(buf, "deadline") || !strcmp(buf, "dl"))
		return parse_deadline(args, spec, buf[1] == 'l', out);
	return wl_err("--sched '%s': policy must be other, rr, fifo or deadline (dl)", spec);
}

static int apply_deadline(const struct wl_sched *s, const char *who)
{
	struct sched_attr_dl at = {.size = sizeof(at), .policy = WL_SCHED_DEADLINE_POLICY,
				   .runtime = s->runtime_ns, .deadline = s->deadline_ns, .period = s->period_ns};
	if (syscall(SYS_sched_setattr, 0, &at, 0) == 0)
		return 0;
	int e = errno;
	const char *hint = e == EPERM ? " (needs root or CAP_SYS_NICE, and a worker whose affinity spans all CPUs:"
					" no -c, no taskset)"
			 : e == EBUSY ? " (admission control: the CPUs' deadline bandwidth, sched_rt_runtime_us per"
					" sched_rt_period_us, cannot fit RUNTIME/PERIOD for every worker)"
				      : "";
	return wl_err("%s: sched_setattr SCHED_DEADLINE %llu/%llu/%llu ns: %s%s", who,
		      (unsigned long long)s->runtime_ns, (unsigned long long)s->deadline_ns,
		      (unsigned long long)s->period_ns, strerror(e), hint);
}

int wl_sched_apply(const struct wl_sched *s, const char *who)
{
	switch (s->policy) {
	case WL_SCHED_DEFAULT:
		return 0;
	case WL_SCHED_OTHER:
		if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), s->value) < 0)
			return wl_err("%s: setpriority %d: %s", who, s->value, strerror(errno));
		return 0;
	case WL_SCHED_RR:
	case WL_SCHED_FIFO: {
		struct sched_param sp = {.sched_priority = s->value};
		int rc = pthread_setschedparam(pthread_self(), s->policy == WL_SCHED_RR ? SCHED_RR : SCHED_FIFO, &sp);
		if (rc != 0)
			return wl_err("%s: %s priority %d: %s (needs CAP_SYS_NICE)", who,
				      s->policy == WL_SCHED_RR ? "SCHED_RR" : "SCHED_FIFO", s->value, strerror(rc));
		return 0;
	}
	case WL_SCHED_DEADLINE:
		return apply_deadline(s, who);
	}
	return -1;
}
