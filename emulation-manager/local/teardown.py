"""Carry out a cleanup plan (cleanup_plan.plan_cleanup, which has checked
every record against the run's naming): the same code undoes a run at its
normal end and after a SIGKILL of its manager.

Every step checks identity again when it acts, since time has passed since
the plan: a pid is killed only if its start time matches the journal and it
still lives in the run's namespace (through a pidfd, so a pid recycled
meanwhile is never signalled), a process is killed for living in a namespace
only if that namespace's file still has the inode recorded at creation, and
files are removed below /etc/netns and bpffs without following a symlink.
A control group is removed with rmdir only (the kernel refuses it while a
process is in it; nothing is killed for being in one), at a path the plan
derived from the run id and an instance name.
Missing objects are skipped, so running a plan twice is harmless.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from collapsar.errors import RunError
from collapsar.manager.local import firewall
from collapsar.manager.local.cleanup import PIN_ROOT, Step, in_run_netns, netns_file_inode
from collapsar.manager.local.netns import HOSTS_ROOT
from collapsar.manager.local.rundir import same_process
from collapsar.manager.nsexec import remove_netns
from collapsar.manager.safefiles import remove_beneath


def pids_by_netns() -> dict[int, list[int]]:
    """netns inode -> the processes in it, from one scan of /proc."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/ns/net")  # "net:[4026532177]"
        except OSError:
            continue
        found.setdefault(int(link[5:-1]), []).append(int(entry))
    return found


def _kill_and_wait(pids: list[int], timeout_s: float = 2.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
        for pid in pids:
            try:  # reap our own children; others are reaped by their parent
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if pids:
            time.sleep(0.005)


class _Context:
    def __init__(self):
        self.ipr = IPRoute()
        self._by_netns: dict[int, list[int]] | None = None

    def pids_in(self, inode: int) -> list[int]:
        if self._by_netns is None:  # one /proc scan for all the run's namespaces
            self._by_netns = pids_by_netns()
        return self._by_netns.get(inode, [])


def execute(steps: list[Step]) -> list[str]:
    """Run the steps; return one line per thing actually removed."""
    done: list[str] = []
    ctx = _Context()
    try:
        for step in steps:
            line = _STEPS[step.action](step.target, ctx)
            if line:
                done.append(line)
    finally:
        ctx.ipr.close()
    return done


def _kill(target: dict, ctx: _Context) -> str | None:
    pid = int(target["pid"])
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    try:
        # Checked after the pidfd holds the process: had the pid been
        # recycled in between, these checks fail (another start time) or
        # the pidfd's process is already gone and the signal below fails.
        if not (same_process(pid, target.get("start_time")) and in_run_netns(pid, target["netns"], target["inode"])):
            return None
        try:  # the command leads its own process group (supervisor: new session)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
    finally:
        os.close(pidfd)
    _kill_and_wait([pid])
    return f"killed pid {pid} ({target.get('instance')})"


def _kill_netns(target: dict, ctx: _Context) -> str | None:
    if netns_file_inode(target["netns"]) != target["inode"]:
        return None
    pids = [pid for pid in ctx.pids_in(target["inode"]) if pid != os.getpid()]
    if not pids:
        return None
    _kill_and_wait(pids)
    return f"killed {len(pids)} process(es) left in {target['netns']}"


def _unpin(target: dict, ctx: _Context) -> str | None:
    relative = Path(target["path"]).relative_to(PIN_ROOT).parts
    if not remove_beneath(str(PIN_ROOT), list(relative)):
        return None
    return f"removed pinned BPF object {target['path']}"


def _del_link(target: dict, ctx: _Context) -> str | None:
    indexes = ctx.ipr.link_lookup(ifname=target["name"])
    if not indexes:
        return None
    try:
        ctx.ipr.link("del", index=indexes[0])
    except NetlinkError as error:
        if error.code == 19:  # ENODEV: went away with its peer meanwhile
            return None
        raise
    return f"deleted link {target['name']}"


def _del_netns(target: dict, ctx: _Context) -> str | None:
    return f"deleted netns {target['netns']}" if remove_netns(target["netns"]) else None


def _rm_hosts(target: dict, ctx: _Context) -> str | None:
    path = Path(target["path"])
    if not remove_beneath(str(HOSTS_ROOT), list(path.relative_to(HOSTS_ROOT).parts), rmdir_parent=True):
        return None
    return f"removed {path}"


def _del_fw(target: dict, ctx: _Context) -> str | None:
    if not firewall.remove_rule(target["bridge"], target["tag"]):
        return None
    return f"deleted the iptables FORWARD rule for {target['bridge']}"


def _rm_cgroup(target: dict, ctx: _Context, wait_s: float = 2.0) -> str | None:
    path = Path(target["path"])
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return f"removed control group {path}"
        except FileNotFoundError:
            return None
        except OSError as error:
            # Killed processes leave their groups as they exit: give them a moment.
            if error.errno == errno.EBUSY and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            held = _pids_in(path)
            raise RunError(
                f"cannot remove the control group {path}: {error.strerror}"
                + (f" (processes still in it: {', '.join(held[:5])})" if held else "")
            ) from None


def _pids_in(group: Path) -> list[str]:
    try:
        return (group / "cgroup.procs").read_text().split()
    except OSError:
        return []


_STEPS = {
    "del_fw": _del_fw,
    "kill": _kill,
    "kill_netns": _kill_netns,
    "unpin": _unpin,
    "del_link": _del_link,
    "del_netns": _del_netns,
    "rm_hosts": _rm_hosts,
    "rm_cgroup": _rm_cgroup,
}
