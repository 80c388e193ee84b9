/* storage_file: where the storage file lives, opened without following
 * symlinks (storage_file.c says why). storage.c calls it. */
#pragma once
#include "util.h"

#include <limits.h>

struct wl_storage_file {
	int fd;
	int dirfd;     /* the default file's private directory, or -1 for a -s path */
	char name[32]; /* the default file's name in it: removed at exit */
	char path[PATH_MAX];
};

int wl_storage_file_open(const char *path, bool odirect, struct wl_storage_file *f); /* path NULL: the default */
void wl_storage_file_close(struct wl_storage_file *f);
