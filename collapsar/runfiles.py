"""Reading a run directory without trusting what is in it (`collapsar
report`, `collapsar trace`).

A run directory holds files that instances wrote (RUNDIR/workload/), and
what is read from it may be made by root and then shared (a report): a file planted as a symlink to
/etc/shadow, a FIFO, or a file of a terabyte must not end up in the page or
hang the command.  So every file is opened through a descriptor of the run
directory, one component at a time, never following a symlink (O_NOFOLLOW
on every component), must be a regular file, and is read up to a bound.  A
file that fails these checks reads as absent, with a note saying why.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from collapsar.errors import CollapsarError

REPORT_FILE = "report.html"  # what `collapsar report RUNDIR` writes by default
MAX_JSON_BYTES = 64 << 20
MAX_TEXT_BYTES = 4 << 20  # the experiment file, t0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_regular(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """A read descriptor of a regular file, its last component never
    followed; OSError (ELOOP for a symlink) otherwise."""
    fd = os.open(path, _FILE_FLAGS, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    return fd


class RunDirError(CollapsarError):
    """A run directory that cannot be read as one: bad input, exit 2."""

    exit_code = 2


class RunFiles:
    """The files of one run directory, read as described above; `notes`
    collects why a file that is there was not read."""

    def __init__(self, run_dir: str | os.PathLike, within: RunFiles | None = None):
        """`run_dir` as named, or, `within` a set of runs, its folder of that
        name (a symlink there is not followed)."""
        self.path: Path = Path(run_dir) if within is None else within.path / run_dir
        try:
            if within is None:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            else:
                self.fd = os.open(run_dir, _DIR_FLAGS, dir_fd=within.fd)
        except FileNotFoundError:
            raise RunDirError(f"{self.path}: no such run directory") from None
        except OSError as error:
            if isinstance(error, PermissionError):
                raise RunDirError(f"{self.path}: permission denied (run directories are root's: use sudo)") from None
            what = "a symlink" if error.errno == errno.ELOOP or self._is_link(run_dir, within) else "not a directory"
            raise RunDirError(f"{self.path}: {what}; expected a run directory of `collapsar run`") from None
        self.notes: list[str] = []

    @staticmethod
    def _is_link(name: str | os.PathLike, within: RunFiles | None) -> bool:
        try:
            return stat.S_ISLNK(
                os.stat(name, dir_fd=None if within is None else within.fd, follow_symlinks=False).st_mode
            )
        except OSError:
            return False

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> RunFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self, name: str) -> int | None:
        """A descriptor of RUNDIR/name (a regular file), or None with a note."""
        *dirs, leaf = name.split("/")
        fds: list[int] = []
        try:
            at = self.fd
            for part in dirs:
                at = os.open(part, _DIR_FLAGS, dir_fd=at)
                fds.append(at)
            return open_regular(leaf, at)
        except FileNotFoundError:
            return None
        except OSError as error:
            reason = "a symlink (never followed)" if error.errno == errno.ELOOP else error.strerror or error
            self.notes.append(f"{name} not read: {reason}")
            return None
        finally:
            for opened in fds:
                os.close(opened)

    def exists(self, name: str) -> bool:
        fd = self._open(name)
        if fd is None:
            return False
        os.close(fd)
        return True

    def read_bytes(self, name: str, limit: int) -> bytes | None:
        fd = self._open(name)
        if fd is None:
            return None
        with open(fd, "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            self.notes.append(f"{name} not read: larger than {limit >> 20} MiB")
            return None
        return data

    def text(self, name: str, limit: int = MAX_TEXT_BYTES) -> str | None:
        data = self.read_bytes(name, limit)
        return None if data is None else data.decode("utf-8", "replace")

    def json(self, name: str, kind: type = dict):
        """RUNDIR/name as JSON of the given kind, None (with a note) if it is not."""
        data = self.read_bytes(name, MAX_JSON_BYTES)
        if data is None:
            return None
        try:
            value = json.loads(data)
        except ValueError as error:
            self.notes.append(f"{name} not read: not JSON ({error})")
            return None
        if not isinstance(value, kind):
            self.notes.append(f"{name} not read: expected a JSON {'list' if kind is list else 'object'}")
            return None
        return value

    def csv_rows(self, name: str) -> Iterator[dict[str, str]]:
        """RUNDIR/name's rows as dicts by its header, streamed: a series of
        a long run is read once and never held whole."""
        fd = self._open(name)
        if fd is None:
            return
        with io.TextIOWrapper(open(fd, "rb"), encoding="utf-8", errors="replace", newline="") as handle:
            yield from csv.DictReader(handle)

    def names(self, folder: str) -> list[str]:
        """The names in RUNDIR/folder (not followed if a symlink), sorted."""
        try:
            fd = os.open(folder, _DIR_FLAGS, dir_fd=self.fd)
        except OSError:
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)


def write_replacing(path: Path, text: str) -> None:
    """`text` at `path`: written to a new file beside it, then renamed over it."""
    folder = path.parent if str(path.parent) else Path(".")
    temporary = folder / f".{path.name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o644)
    except OSError as error:
        raise CollapsarError(f"{path}: cannot write here ({error.strerror})") from None
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
