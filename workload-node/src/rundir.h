/* rundir: who this process is in a run, and the files it leaves in the run
 * directory. A run names every instance in the environment and collects
 * each instance's trace and per-request output into one directory:
 *
 *   COLLAPSAR_SERVICE    service.name (default: the program, wl-node or wl-client)
 *   COLLAPSAR_INSTANCE   service.instance.id and the files' names (default: the host name)
 *   COLLAPSAR_RUN_ID     collapsar.run_id, when set
 *   COLLAPSAR_TRACE_DIR  where the files go when no --trace was given:
 *                        INSTANCE.spans.jsonl, and for wl-client INSTANCE.requests.csv
 *                        and INSTANCE.summary.json
 *
 * A file there is created, never reused or followed: O_EXCL|O_NOFOLLOW, so
 * two instances with one name, or a planted symlink, fail the start. */
#pragma once
#include "util.h"

#define WL_NAME_MAX 200 /* bytes of a service, instance or run name */

struct wl_identity {
	char service[WL_NAME_MAX + 1], instance[WL_NAME_MAX + 1], run_id[WL_NAME_MAX + 1];
	long pid;
};

/* From the environment, the defaults where unset; -1 (said) when a value is
 * too long or the host has no name. */
int wl_identity_load(struct wl_identity *id, const char *default_service);
/* $COLLAPSAR_TRACE_DIR, or NULL when it is unset or empty. */
const char *wl_rundir(void);
/* -1 (said) for an instance name that cannot name a file in the run
 * directory: empty, containing '/', or starting with '.'. */
int wl_rundir_check_instance(const char *instance);
/* Create DIR/INSTANCE.SUFFIX exclusively (mode 0644); the descriptor, or -1 (said). */
int wl_rundir_create(const char *dir, const char *instance, const char *suffix);
