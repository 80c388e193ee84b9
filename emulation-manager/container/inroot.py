"""Files inside a container's root, opened so that no path leads out of it.

Owns: the openat2(2) call (Python 3.11 has no os.openat2), and
`open_regular` and `create_new`, the only ways the manager opens a file a
container controls.  Does not own: what is read or written (hostsfile.py).

A container's files are reached through /proc/PID/root, but a path walked
from there resolves the container's symlinks against *this* process's root:
an absolute link (`/proc/1/root/etc/shadow`, with the host's PID namespace)
or enough `..` lands outside the container, where the manager may write
anything.  openat2 with RESOLVE_IN_ROOT walks every component as if the
container's root were "/" (absolute links and `..` stop there), and
RESOLVE_NO_MAGICLINKS refuses /proc's links, which jump to wherever they
point whatever the root.

Mount crossings are allowed (no RESOLVE_NO_XDEV): Docker's /etc/hosts is
itself a bind mount, and a container cannot add mounts (no CAP_SYS_ADMIN);
the mounts it has are part of what it sees as its root anyway.

The last component is never followed (O_NOFOLLOW), even inside the root:
the files the manager opens are its own mark or Docker's bind-mounted
hosts file, so a link there was planted by the workload, and a non-root
workload can plant one in /tmp that points at, say, its /etc/shadow, which
the manager, root, would then overwrite (fs.protected_symlinks is off on
some hosts).  The earlier components (/tmp, /etc) belong to the image's root
user: a link there is the container's root pointing into its own files.

The file is first opened as O_PATH, which runs no driver code, and handed
out only when fstat says it is a regular file: a FIFO would block the
manager on open or read, and a device node (Docker grants CAP_MKNOD) would
be a device of the host, opened with the manager's privileges.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

# openat2 has the same number on every architecture that has it (it came
# after the per-architecture tables were unified).
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
IN_CONTAINER = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS


class RefusedFile(OSError):
    """A file the manager will not open: it is there, but not a regular file
    of a sane size.  An OSError, so callers that retry on OSError still do."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()  # always given: RefusedFile(errno, message)


class _OpenHow(ctypes.Structure):  # struct open_how, include/uapi/linux/openat2.h
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = 0) -> int:
    """openat2(2): a new fd, or OSError naming `path`."""
    # The kernel refuses a mode without O_CREAT / O_TMPFILE (EINVAL).
    how = _OpenHow(flags, mode if flags & (os.O_CREAT | os.O_TMPFILE) else 0, resolve)
    encoded = os.fsencode(path)
    while True:
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code == errno.EINTR:
            continue
        if code == errno.ENOSYS:
            raise OSError(
                code,
                "openat2 is not available: opening files in containers safely needs "
                "Linux >= 5.6 and a seccomp profile that allows openat2",
                path,
            )
        raise OSError(code, os.strerror(code), path)


def open_root(pid: int) -> int:
    """An O_PATH fd on the root directory of process `pid` (its container's
    root): the anchor every other open here resolves against."""
    return os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def open_regular(root_fd: int, path: str, flags: int, where: str, max_bytes: int | None = None) -> int:
    """`path` under `root_fd`, opened with `flags` (O_RDONLY, O_RDWR, ...)
    only if it is a regular file (of at most `max_bytes`); `where` names the
    root in errors.  OSError when it is not there (ENOENT) or resolving it
    meets a /proc link (ELOOP); RefusedFile when it is a link, another kind
    of file, or too long."""
    pinned = _pin_regular(root_fd, path, where, max_bytes)
    try:
        # Reopened through our own fd, which holds the inode just checked: it
        # cannot be swapped for another file between the check and the open.
        return os.open(f"/proc/self/fd/{pinned}", flags | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(pinned)


def create_new(root_fd: int, path: str, where: str) -> int | None:
    """A new, empty regular file `path` under `root_fd`, open for writing;
    None when a regular file is already there (left as it is: writing into
    it would write into whatever else it is a hard link of).  Anything else
    in its place is a RefusedFile."""
    try:
        return openat2(
            root_fd,
            path,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode=0o644,
            resolve=IN_CONTAINER,
        )
    except FileExistsError:  # O_EXCL also refuses a link, dangling or not: checked next
        pass
    os.close(_pin_regular(root_fd, path, where, None))
    return None


def _pin_regular(root_fd: int, path: str, where: str, max_bytes: int | None) -> int:
    """An O_PATH fd on `path`, checked to be a regular file: O_PATH runs no
    driver code, so neither a FIFO nor a device is ever really opened."""
    pinned = openat2(root_fd, path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, resolve=IN_CONTAINER)
    try:
        found = os.fstat(pinned)
        if not stat.S_ISREG(found.st_mode):
            raise RefusedFile(errno.EINVAL, f"{where}/{path} is a {_kind(found.st_mode)}, not a regular file")
        if max_bytes is not None and found.st_size > max_bytes:
            raise RefusedFile(
                errno.EFBIG, f"{where}/{path} is {found.st_size} bytes, more than the {max_bytes} expected at most"
            )
    except BaseException:
        os.close(pinned)
        raise
    return pinned


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return f"file of mode {mode:o}"
