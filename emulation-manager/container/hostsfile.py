"""Instance names in the containers' /etc/hosts, and the mark that says a
container is shaped.

Docker's DNS knows services (`client`), not the topology's instances
(`client-2`).  The manager keeps one marked block in each shaped
container's /etc/hosts with every instance whose address it knows, so that
a name means in a container what it means in local mode: `client` is the
service's first instance, `client-2` its second.  The file is Docker's own
(bind-mounted from the container's directory), reached through
/proc/PID/root: rewritten in place, never replaced, and the lines outside
the block are kept.
"""

from __future__ import annotations

import os

# Written into a container once it is shaped and named: the generated
# files make the workload image's commands wait for it (deploy/stack.py).
SHAPED_MARK = "/tmp/collapsar-shaped"
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
    process is `pid`; OSError when it is gone (the next scan sees that).
    A process that shares this manager's root is no container: its
    /etc/hosts is the host's, and is left alone (False)."""
    if not _in_a_container(pid):
        return False
    with open(f"/proc/{pid}/root/etc/hosts", "r+") as handle:
        new = with_block(handle.read(), ip_of)
        handle.seek(0)
        handle.write(new)
        handle.truncate()
    return True


def mark_shaped(pid: int) -> bool:
    """Tell the container whose main process is `pid` that its paths are
    shaped (a generated command waits for this); False for a process that is
    no container (see `update`)."""
    if not _in_a_container(pid):
        return False
    with open(f"/proc/{pid}/root{SHAPED_MARK}", "w") as handle:
        handle.write("shaped\n")
    return True


def _in_a_container(pid: int) -> bool:
    root, ours = os.stat(f"/proc/{pid}/root"), os.stat("/")
    return (root.st_dev, root.st_ino) != (ours.st_dev, ours.st_ino)
