"""Instance names in the containers' /etc/hosts, and the mark that says a
container is shaped.

Docker's DNS knows services (`client`), not the topology's instances
(`client-2`).  The manager keeps one marked block in each shaped
container's /etc/hosts with every instance whose address it knows, so that
a name means in a container what it means in local mode: `client` is the
service's first instance, `client-2` its second.  The file is Docker's own
(bind-mounted from the container's directory), reached through
/proc/PID/root: rewritten in place, never replaced, and the lines outside
the block are kept, byte for byte.

Both files are the container's, so a hostile workload may have put a link,
a FIFO, a device or a huge file there: they are opened through inroot.py,
which never resolves a path outside the container's root and hands out
only regular files.  Whatever it refuses is an OSError, as a container
that stopped meanwhile is, and costs that container its names or its mark,
never the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from collapsar.deploy.naming import SHAPED_MARK
from collapsar.manager.container.inroot import RefusedFile, create_new, open_regular, open_root

HOSTS = "/etc/hosts"
# Docker's file holds a few lines; a megabyte is a container stuffing it.
MAX_HOSTS_BYTES = 1 << 20
BEGIN = "# collapsar: the experiment's instances (kept by the emulation manager)"
END = "# collapsar: end"


def with_block(text: str, ip_of: dict[str, str]) -> str:
    """`text` with its block (if any) replaced by one for `ip_of`."""
    kept, inside = [], False
    for line in text.splitlines():
        if line == BEGIN:
            inside = True
        elif line == END and inside:
            inside = False
        elif not inside:
            kept.append(line)
    block = [BEGIN, *(f"{ip}\t{name}" for name, ip in sorted(ip_of.items())), END]
    return "\n".join(kept + block) + "\n"


def update(pid: int, ip_of: dict[str, str]) -> bool:
    """Rewrite the block in the /etc/hosts of the container whose main
    process is `pid`; OSError when it is gone (the next scan sees that) or
    its file is refused (inroot.py).  A process that shares this manager's
    root is no container: its /etc/hosts is the host's, and is left alone
    (False)."""
    with _container_root(pid) as root:
        if root is None:
            return False
        rewrite_hosts(root, f"/proc/{pid}/root", ip_of)
    return True


def mark_shaped(pid: int) -> bool:
    """Tell the container whose main process is `pid` that its paths are
    shaped (a generated command waits for this); False for a process that is
    no container (see `update`)."""
    with _container_root(pid) as root:
        if root is None:
            return False
        write_mark(root, f"/proc/{pid}/root")
    return True


def rewrite_hosts(root_fd: int, where: str, ip_of: dict[str, str]) -> None:
    """`update` in the root open as `root_fd` (`where` names it in errors)."""
    fd = open_regular(root_fd, HOSTS.lstrip("/"), os.O_RDWR, where, MAX_HOSTS_BYTES)
    with open(fd, "r+b") as handle:
        old = handle.read(MAX_HOSTS_BYTES + 1)
        if len(old) > MAX_HOSTS_BYTES:  # it grew after it was checked
            raise RefusedFile(errno.EFBIG, f"{where}{HOSTS} is more than {MAX_HOSTS_BYTES} bytes")
        # surrogateescape: bytes outside the block that are no UTF-8 are the
        # container's business, kept as they were, and never a crash.
        new = with_block(old.decode("utf-8", "surrogateescape"), ip_of).encode("utf-8", "surrogateescape")
        handle.seek(0)
        handle.write(new)
        handle.truncate()


def write_mark(root_fd: int, where: str) -> None:
    """`mark_shaped` in the root open as `root_fd`.  A mark already there is
    left as it is: the command waits for the file, not for what it says."""
    fd = create_new(root_fd, SHAPED_MARK.lstrip("/"), where)
    if fd is not None:
        with open(fd, "wb") as handle:
            handle.write(b"shaped\n")


@contextlib.contextmanager
def _container_root(pid: int) -> Iterator[int | None]:
    """The root of `pid`, open; None when it is this manager's own."""
    root = open_root(pid)
    try:
        found, ours = os.fstat(root), os.stat("/")
        yield root if (found.st_dev, found.st_ino) != (ours.st_dev, ours.st_ino) else None
    finally:
        os.close(root)
