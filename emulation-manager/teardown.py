"""Carry out a cleanup plan (rundir.plan_cleanup): the same code undoes a
run at its normal end and after a SIGKILL of its manager.

Every step checks identity before acting: a pid is killed only if its start
time matches the journal, a process is killed for living in a namespace only
if that namespace's file still has the inode recorded at creation.  Missing
objects are skipped, so running a plan twice is harmless.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from . import firewall
from .nsexec import netns_inode, remove_netns
from .rundir import Step, same_process


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
    if not same_process(pid, target.get("start_time")):
        return None
    try:  # the command leads its own process group (supervisor: new session)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _kill_and_wait([pid])
    return f"killed pid {pid} ({target.get('instance')})"


def _kill_netns(target: dict, ctx: _Context) -> str | None:
    if netns_inode(target["netns"]) != target["inode"]:
        return None
    pids = [pid for pid in ctx.pids_in(target["inode"]) if pid != os.getpid()]
    if not pids:
        return None
    _kill_and_wait(pids)
    return f"killed {len(pids)} process(es) left in {target['netns']}"


def _unpin(target: dict, ctx: _Context) -> str | None:
    try:
        os.unlink(target["path"])
    except FileNotFoundError:
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
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    try:
        path.parent.rmdir()  # only if empty: a user's own files there stay
    except OSError:
        pass
    return f"removed {path}"


def _del_fw(target: dict, ctx: _Context) -> str | None:
    if not firewall.remove_rule(target["bridge"], target["tag"]):
        return None
    return f"deleted the iptables FORWARD rule for {target['bridge']}"


_STEPS = {"del_fw": _del_fw, "kill": _kill, "kill_netns": _kill_netns, "unpin": _unpin,
          "del_link": _del_link, "del_netns": _del_netns, "rm_hosts": _rm_hosts}
