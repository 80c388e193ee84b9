/* rundir: the COLLAPSAR_* environment and the run directory's files. */
#include "rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copy the variable (or the fallback when unset) into out; a value that does
 * not fit is refused rather than cut, since a cut name could be another's. */
static int env_name(const char *var, const char *fallback, char *out, size_t cap)
{
	const char *v = getenv(var);
	if (!v)
		v = fallback;
	if (strlen(v) >= cap)
		return wl_err("%s: '%.40s...' is longer than %zu bytes", var, v, cap - 1);
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

int wl_identity_load(struct wl_identity *id, const char *default_service)
{
	char host[HOST_NAME_MAX + 1];
	if (gethostname(host, sizeof(host)) < 0)
		return wl_err("gethostname (the default of COLLAPSAR_INSTANCE): %s", strerror(errno));
	host[HOST_NAME_MAX] = '\0';
	id->pid = (long)getpid();
	if (env_name("COLLAPSAR_SERVICE", default_service, id->service, sizeof(id->service)) < 0 ||
	    env_name("COLLAPSAR_INSTANCE", host, id->instance, sizeof(id->instance)) < 0 ||
	    env_name("COLLAPSAR_RUN_ID", "", id->run_id, sizeof(id->run_id)) < 0)
		return -1;
	return 0;
}

const char *wl_rundir(void)
{
	const char *dir = getenv("COLLAPSAR_TRACE_DIR");
	return dir && dir[0] ? dir : NULL;
}

int wl_rundir_check_instance(const char *instance)
{
	if (!instance[0] || instance[0] == '.' || strchr(instance, '/'))
		return wl_err("COLLAPSAR_INSTANCE '%s' cannot name a file in COLLAPSAR_TRACE_DIR "
			      "(it must be non-empty, without '/', and not start with '.')",
			      instance);
	return 0;
}

int wl_rundir_create(const char *dir, const char *instance, const char *suffix)
{
	char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s.%s", dir, instance, suffix);
	if (n < 0 || (size_t)n >= sizeof(path))
		return wl_err("COLLAPSAR_TRACE_DIR: the path of %s.%s in %s is too long", instance, suffix, dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 && errno == EEXIST)
		return wl_err("create %s: it exists (another instance named '%s' in this run, or a symlink)", path,
			      instance);
	if (fd < 0)
		return wl_err("create %s (COLLAPSAR_TRACE_DIR): %s", path, strerror(errno));
	return fd;
}
