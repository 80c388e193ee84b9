/* libcxcounters: load, attach, read and detach the per-destination egress
 * counters (counters.bpf.c) on one interface inside one network namespace.
 * (The library also holds the duplicator: duplicator.h.)
 *
 * Every function returns -1 (or NULL) on failure and records what failed in a
 * per-thread buffer: cx_last_error() gives the message, cx_last_errno() the
 * errno and cx_last_stage() which step failed (enum cx_stage), so a caller can
 * turn it into a precise error without parsing text.
 */
#ifndef CX_LOADER_H
#define CX_LOADER_H

#include <linux/types.h>
#include <stdbool.h>
#include "counters.h"

enum cx_stage {
	CX_STAGE_NONE = 0,
	CX_STAGE_NETNS = 1,	/* opening or entering the namespace */
	CX_STAGE_IFACE = 2,	/* interface name not found in the namespace */
	CX_STAGE_LOAD = 3,	/* open/verify/load of the BPF object */
	CX_STAGE_ATTACH = 4,	/* clsact hook or tc filter */
	CX_STAGE_READ = 5,	/* map reads */
	CX_STAGE_DETACH = 6,	/* removing the filter or our clsact */
	CX_STAGE_ARG = 7,	/* a bad argument from the caller */
	CX_STAGE_UPDATE = 8,	/* writing a map (the duplicator's probabilities) */
};

struct cx_counters;

/* Load the program and attach it at clsact egress of ifname in netns (a name
 * under /var/run/netns, an absolute path, or NULL/"" for the caller's own).
 * max_entries bounds the number of destinations kept; wire_overhead_bytes is
 * added per wire packet (24 models Ethernet preamble, FCS and gap). */
struct cx_counters *cx_counters_attach(const char *ifname, const char *netns,
				       __u32 max_entries,
				       __u32 wire_overhead_bytes);

/* Fill out[0..capacity) with every destination's summed counters; returns how
 * many were written.  capacity must be at least cx_counters_capacity(). */
int cx_counters_read(struct cx_counters *cx, struct cx_entry *out, __u32 capacity);

/* The non-IPv4 slot (ARP, IPv6, ...). */
int cx_counters_read_other(struct cx_counters *cx, struct cx_value *out);

/* Remove our filter, and our clsact if we created it; safe to call again and
 * after the interface or namespace is gone. */
int cx_counters_detach(struct cx_counters *cx);

/* Detach (best effort) and release everything; NULL is fine. */
void cx_counters_free(struct cx_counters *cx);

__u32 cx_counters_capacity(const struct cx_counters *cx);
/* tc handle, priority and program id of our filter, for checks and logs. */
int cx_counters_filter(const struct cx_counters *cx, __u32 *handle,
		       __u32 *priority, __u32 *prog_id);
/* Force the get_next_key reader (use_batch false) to test the fallback. */
void cx_counters_use_batch(struct cx_counters *cx, bool use_batch);

const char *cx_last_error(void);
int cx_last_errno(void);
int cx_last_stage(void);

#endif /* CX_LOADER_H */
