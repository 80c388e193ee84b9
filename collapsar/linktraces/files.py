"""Reading a trace file: opened below the experiment's folder without
following a symlink, bounded, and told apart by its first line that is
not blank or a comment (a number: Mahimahi; else CSV)."""

from __future__ import annotations

import errno
import io
import itertools
import os
from collections.abc import Iterator

from collapsar.errors import Problem, TopologyError, Where
from collapsar.linktraces.base import MAX_TRACE_BYTES, Trace
from collapsar.linktraces.csvtrace import CsvTrace
from collapsar.linktraces.mahimahi import MahimahiTrace
from collapsar.runfiles import open_regular

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read_trace_file(folder: str, relative: str) -> bytes:
    """The bytes of `relative` below `folder`, opened one component at a time
    without following a symlink; CollapsarError-free: an OSError's reason
    comes back as a ValueError with the sentence to show."""
    parts = relative.split("/")
    if os.path.isabs(relative) or ".." in parts or not all(parts):
        raise ValueError("expected a path below the experiment file's folder (relative, without ..)")
    opened: list[int] = []
    try:
        at = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        opened.append(at)
        for part in parts[:-1]:
            at = os.open(part, _DIR_FLAGS, dir_fd=at)
            opened.append(at)
        fd = open_regular(parts[-1], at)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(parts, opened):
            raise ValueError("a symlink on its path; trace files are never read through one") from None
        raise ValueError(f"cannot read it: {error.strerror or error}") from None
    finally:
        for descriptor in opened:
            os.close(descriptor)
    try:
        with open(fd, "rb") as handle:
            data = handle.read(MAX_TRACE_BYTES + 1)
    except OSError as error:
        raise ValueError(f"cannot read it: {error.strerror or error}") from None
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"larger than {MAX_TRACE_BYTES >> 20} MiB")
    return data


def _is_link(parts: list[str], opened: list[int]) -> bool:
    """Whether the component that failed to open is a symlink."""
    try:
        mode = os.stat(parts[len(opened) - 1], dir_fd=opened[-1], follow_symlinks=False).st_mode
    except (OSError, IndexError):
        return False
    return (mode & 0o170000) == 0o120000


def parse_trace(name: str, data: bytes) -> Trace:
    """A CSV or Mahimahi trace; TopologyError naming `name`:LINE otherwise."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise TopologyError([Problem(Where(name, line), "not UTF-8 text; a trace is CSV or Mahimahi text")]) from None
    lines = _lines(text)
    first = next(lines, None)
    if first is None:
        raise TopologyError([Problem(Where(name, 1), "empty; expected a CSV header like time,bandwidth or a number")])
    if first[1].isdigit():
        return MahimahiTrace.parse(name, itertools.chain([first], lines))
    return CsvTrace.parse(name, first, lines)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(number, line) of each line but blank ones and comments, one at a
    time: a list of a 4-million-line file's lines would take a gigabyte."""
    for number, line in enumerate(io.StringIO(text), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield number, line
