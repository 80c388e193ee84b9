/* storage_file: where the storage file lives and how it is opened. A node
 * often runs as root, and a fixed name in a shared /tmp would let anyone
 * plant a symlink there and have the node write wherever it points. So:
 * - the default file is per instance, $TMPDIR/wl-node-UID/PID.storage, in a
 *   directory that must be a real directory owned by this user and not
 *   writable by others (nobody else can plant anything in it), created
 *   exclusively and removed when the node exits;
 * - a -s PATH is never followed if it is a symlink, and an existing regular
 *   file must belong to this user and have a single link.
 * Every check is made on the opened descriptor, not on the name. */
#include "storage_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int open_private_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return wl_err("storage: mkdir %s: %s", dir, strerror(errno));
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
		return wl_err("storage: %s is a symlink or not a directory: refusing to use it (remove it, or pass -s PATH)",
			      dir);
	if (fd < 0)
		return wl_err("storage: open %s: %s", dir, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0) {
		wl_err("storage: fstat %s: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 022)) {
		wl_err("storage: %s belongs to uid %u with mode %03o, not to uid %u and writable only by it: refusing to "
		       "use it (remove it, or pass -s PATH)",
		       dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
		close(fd);
		return -1;
	}
	return fd;
}

static int open_default(bool odirect, struct wl_storage_file *f)
{
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX];
	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(dir, sizeof(dir), "%s/wl-node-%u", tmp, (unsigned)geteuid()) >= sizeof(dir))
		return wl_err("storage: $TMPDIR is too long (%zu bytes)", strlen(tmp));
	snprintf(f->name, sizeof(f->name), "%ld.storage", (long)getpid());
	if ((size_t)snprintf(f->path, sizeof(f->path), "%s/%s", dir, f->name) >= sizeof(f->path))
		return wl_err("storage: $TMPDIR is too long (%zu bytes)", strlen(tmp));
	if ((f->dirfd = open_private_dir(dir)) < 0)
		return -1;
	int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (odirect ? O_DIRECT : 0);
	f->fd = openat(f->dirfd, f->name, flags, 0600);
	if (f->fd < 0 && errno == EEXIST) {
		/* Left by an earlier node with this pid that did not exit cleanly: in a
		 * directory only this user can write, so it is ours to replace. */
		if (unlinkat(f->dirfd, f->name, 0) < 0)
			wl_err("storage: unlink stale %s: %s", f->path, strerror(errno));
		f->fd = openat(f->dirfd, f->name, flags, 0600);
	}
	if (f->fd < 0) {
		wl_err("storage: open %s%s: %s", f->path, odirect ? " (O_DIRECT)" : "", strerror(errno));
		close(f->dirfd);
		f->dirfd = -1;
		return -1;
	}
	return 0;
}

static int open_given(const char *path, bool odirect, struct wl_storage_file *f)
{
	if ((size_t)snprintf(f->path, sizeof(f->path), "%s", path) >= sizeof(f->path))
		return wl_err("storage: path too long (%zu bytes)", strlen(path));
	f->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (odirect ? O_DIRECT : 0), 0600);
	if (f->fd < 0 && errno == ELOOP)
		return wl_err("storage: %s is a symlink: refusing to follow it (pass the path it points to)", path);
	if (f->fd < 0)
		return wl_err("storage: open %s%s: %s", path, odirect ? " (O_DIRECT)" : "", strerror(errno));
	struct stat st;
	const char *bad = NULL;
	if (fstat(f->fd, &st) < 0)
		bad = strerror(errno);
	else if (S_ISREG(st.st_mode) && st.st_uid != geteuid())
		bad = "it belongs to another user";
	else if (S_ISREG(st.st_mode) && st.st_nlink != 1)
		bad = "it has more than one hard link";
	if (bad) {
		wl_err("storage: %s: refusing to write to it: %s", path, bad);
		close(f->fd);
		f->fd = -1;
		return -1;
	}
	return 0;
}

int wl_storage_file_open(const char *path, bool odirect, struct wl_storage_file *f)
{
	*f = (struct wl_storage_file){.fd = -1, .dirfd = -1};
	return path ? open_given(path, odirect, f) : open_default(odirect, f);
}

void wl_storage_file_close(struct wl_storage_file *f)
{
	if (f->fd >= 0 && close(f->fd) < 0)
		wl_err("storage: close %s: %s", f->path, strerror(errno));
	if (f->dirfd >= 0) {
		if (unlinkat(f->dirfd, f->name, 0) < 0)
			wl_err("storage: remove %s: %s", f->path, strerror(errno));
		if (close(f->dirfd) < 0)
			wl_err("storage: close the directory of %s: %s", f->path, strerror(errno));
	}
	f->fd = f->dirfd = -1;
}
