"""Files and directories as root, without trusting anyone else's.

The manager and `collapsar cleanup` run as root and read and write in places
a path names: the state directory, run directories, /etc/netns, bpffs.  A
path is only as safe as every directory on it: whoever can write one of them
can swap what comes after for a symlink (to /etc/shadow, say) between our
check and our use.  So directories we trust are checked component by
component for owner and mode, files are opened with O_NOFOLLOW (and created
with O_EXCL), and removals below a system directory walk it by directory
descriptors that never follow a symlink.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from collapsar.errors import CollapsarError, EnvironmentProblem

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def trusted_owners() -> tuple[int, ...]:
    """Root, and whoever runs us: a non-root user can only hurt themself."""
    return (0, os.geteuid())


def _owner_text() -> str:
    return "root" if os.geteuid() == 0 else f"root or uid {os.geteuid()}"


def check_private_dir(path: Path, what: str, *, sticky_leaf: bool = False) -> Path:
    """`path` with symlinks resolved, once every directory from / down to it
    is owned by a trusted owner and writable by no one else.  A sticky
    directory (/tmp) passes above the leaf, and as the leaf with
    `sticky_leaf`: others may add entries there but not rename or remove
    ours.  Otherwise one line naming the directory and the fix."""
    real = Path(os.path.realpath(path))
    current = Path(real.anchor)
    for depth, part in enumerate(real.parts):
        current = current / part if depth else current
        leaf = depth == len(real.parts) - 1
        where = f"{what} {path}: " + ("" if leaf else f"its parent {current} is ")
        info = os.lstat(current)
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISDIR(info.st_mode):  # realpath resolved every symlink: one appeared since
            raise EnvironmentProblem(f"{where}not a directory", f"remove {current}")
        if info.st_uid not in trusted_owners():
            raise EnvironmentProblem(
                f"{where}owned by uid {info.st_uid}; expected {_owner_text()}", f"chown root {current}"
            )
        if mode & 0o022 and not (mode & stat.S_ISVTX and (sticky_leaf or not leaf)):
            raise EnvironmentProblem(
                f"{where}writable by group or others (mode {mode:04o}); expected a directory only root can write",
                f"chmod go-w {current}",
            )
    return real


def open_private_file(path: Path, what: str) -> int:
    """A read-only descriptor of a regular file that a trusted owner wrote
    and no one else can write; a symlink, a FIFO or anyone else's file is
    refused in one line naming it."""
    try:  # O_NONBLOCK: a FIFO planted in its place must not hang us before fstat says so
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CollapsarError(
                f"{what} {path}: a symlink; expected a regular file written by collapsar run"
            ) from None
        raise CollapsarError(f"{what} {path}: cannot open it: {error.strerror}") from None
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "not a regular file; expected one written by collapsar run"
    elif info.st_uid not in trusted_owners():
        problem = f"owned by uid {info.st_uid}; expected {_owner_text()}"
    elif mode & 0o022:
        problem = f"writable by group or others (mode {mode:04o}); expected 0600"
    if problem:
        os.close(fd)
        raise CollapsarError(f"{what} {path}: {problem}")
    return fd


def read_private_file(path: Path, what: str) -> bytes:
    with os.fdopen(open_private_file(path, what), "rb") as handle:
        return handle.read()


def open_dir(path: Path | str, dir_fd: int | None = None) -> int:
    """A descriptor of the directory `path`; OSError(ELOOP) if it is a symlink."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def create_file_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """A new file `name` in the directory `dir_fd`: never over an existing
    file, never through a symlink (O_EXCL fails on both)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r}: expected a plain file name")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def remove_beneath(root: str, parts: list[str], *, rmdir_parent: bool = False) -> bool:
    """Unlink root/parts[0]/.../parts[-1] (and, if asked and now empty, the
    directory that held it), following no symlink below `root`: a symlinked
    component is not ours to follow, so nothing is removed.  False if there
    was nothing (ours) to remove."""
    if any("/" in part or part in ("", ".", "..") for part in parts):
        raise ValueError(f"{parts!r}: expected plain names below {root}")
    fds: list[int] = []
    try:
        fds.append(open_dir(root))
        for part in parts[:-1]:
            fds.append(open_dir(part, dir_fd=fds[-1]))
        os.unlink(parts[-1], dir_fd=fds[-1])  # unlink never follows its last component
        if rmdir_parent and len(parts) > 1:
            try:  # only if empty now: a user's own files there stay
                os.rmdir(parts[-2], dir_fd=fds[-2])
            except OSError:
                pass
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return False
        raise
    finally:
        for fd in reversed(fds):
            os.close(fd)
    return True
