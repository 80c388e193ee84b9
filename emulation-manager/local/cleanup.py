"""What a run's teardown, or `collapsar cleanup` after a SIGKILL, may undo,
and which run a `collapsar cleanup TARGET` means (find_run).

A journal is a list of claims, and cleanup acts on them as root.  So before
anything is removed, every record it would act on is checked against the
run's own naming (addressing.py): a namespace only as `netns_name(run id,
instance)` (never a path: no '/'), a link only as that run's bridge or the
veth of one of its instances, a hosts file only as /etc/netns/<one of its
namespaces>/hosts, a BPF pin only directly in its pin directory, a control
group only as `collapsar-RUNID[/INSTANCE]` at the top of the hierarchy this
host mounts for its controller (limits.record_problem; the path removed is
derived, never read from the record), a process only if it is still the
process recorded (same start time) and lives in that instance's namespace,
which is still the run's (same inode).  The process check is the one sound
test available after the manager is gone: a pid and its start time can be
copied from /proc, any process can set its own command line and a root one
can move itself into any control group, but only a process the run started,
or one of its children, lives in a namespace that only the run made.  A
process that left it, or whose namespace file is gone, is not killed:
better a stray process than a foreign one killed as root.

A journal with any such record is refused whole, nothing removed, in one
line naming the first bad record, its line and what was expected: the
manager never writes a record that fails these checks, so one that does
means the journal is not (only) the run's, and none of its records can be
taken on trust.  Records cleanup does not act on (qdisc, run, ...) are not
checked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from collapsar.errors import CollapsarError
from collapsar.manager.addressing import check_run_id, netns_name, plan_network
from collapsar.manager.local.cgroups import Layout, detect
from collapsar.manager.local.limits import group_to_remove, record_problem
from collapsar.manager.local.netns import hosts_file
from collapsar.manager.local.rundir import (
    END_KINDS,
    JOURNAL,
    is_run_id,
    list_runs,
    read_journal,
    same_process,
    state_dir,
)
from collapsar.manager.nsexec import netns_path

PIN_ROOT = Path("/sys/fs/bpf/collapsar")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def pin_dir(run_id: str) -> Path:
    """Where a run pins BPF objects, if it ever does (the counters pin none today)."""
    return PIN_ROOT / run_id


@dataclass(frozen=True)
class Step:
    """One cleanup action, in the order it must run."""

    action: str  # kill | kill_netns | unpin | del_link | del_fw | del_netns | rm_hosts | rm_cgroup
    target: dict


def netns_of_process(pid: int) -> int | None:
    """The inode of `pid`'s network namespace; None once it has exited (a
    zombie has none)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def netns_file_inode(name: str) -> int | None:
    """The inode of the namespace mounted at /run/netns/NAME, None if there
    is none (a symlink or a plain file there is not a namespace)."""
    try:
        info = os.lstat(netns_path(name))
    except OSError:
        return None
    return info.st_ino if info.st_dev == os.stat("/proc/self/ns/net").st_dev else None


def in_run_netns(pid: int, netns: str, inode: int) -> bool:
    """`pid` lives in the namespace the run made for it, and the run's
    namespace file still holds that namespace."""
    return netns_of_process(pid) == inode and netns_file_inode(netns) == inode


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_of(items: list[str], none: str) -> str:
    if not items:
        return none
    if len(items) == 1:
        return items[0]
    shown = ", ".join(items[:3])
    return f"one of {shown}" + (f", ... ({len(items)} in all)" if len(items) > 3 else "")


class _Check:
    """The records of one journal against the naming of run `run_id`."""

    def __init__(self, records: list[dict], run_id: str, where: str, layout: Layout | None = None):
        self.records, self.run_id, self.where = records, run_id, where
        self.layout = layout  # the host's cgroups (detected when a record needs them)
        self.problems: list[str] = []
        self.netns: dict[str, str] = {}  # name -> instance, valid netns records only
        self.inodes: dict[str, int] = {}  # name -> inode, valid netns_inode records only

    def bad(self, index: int, why: str) -> None:
        self.problems.append(f"{self.where}:{index + 1}: {why}")

    def of_kind(self, kind: str) -> list[tuple[int, dict]]:
        return [(i, r) for i, r in enumerate(self.records) if r.get("kind") == kind]

    def run(self) -> _Check:
        head = self.records[0]
        if head.get("kind") != "run" or head.get("run_id") != self.run_id:
            self.bad(
                0,
                f"first record {head.get('kind')!r} of run {head.get('run_id')!r}; expected the "
                f"'run' record of run {self.run_id}",
            )
        self.check_namespaces()
        try:
            plan = plan_network(self.run_id, list(self.netns.values()))
        except CollapsarError as error:  # only if the records' instances cannot be a run's
            self.bad(0, f"the journal's instances cannot be one run's: {error}")
            return self
        self.check_links(plan)
        self.check_files()
        self.check_cgroups()
        self.check_processes()
        return self

    def check_namespaces(self) -> None:
        for i, r in self.of_kind("netns"):
            name, instance = r.get("name"), r.get("instance")
            want = netns_name(self.run_id, instance) if isinstance(instance, str) else None
            if want is None or not isinstance(instance, str) or name != want or "/" in want:
                self.bad(
                    i,
                    f"netns record {name!r} (instance {instance}): not a namespace of run "
                    f"{self.run_id}; expected {want or f'cx-{self.run_id}-INSTANCE'}",
                )
            elif want in self.netns:
                self.bad(i, f"netns record {name!r}: a second record of that namespace; expected one")
            else:
                self.netns[want] = instance
        for i, r in self.of_kind("netns_inode"):
            name, inode = r.get("name"), r.get("inode")
            if not isinstance(name, str) or name not in self.netns or not _is_int(inode):
                self.bad(
                    i,
                    f"netns_inode record {name!r}: not a namespace this journal records for run "
                    f"{self.run_id}; expected {_one_of(list(self.netns), 'a recorded one (there is none)')} "
                    f"and an inode number",
                )
            else:
                self.inodes[name] = inode

    def check_links(self, plan) -> None:
        nets = plan.by_instance()
        for i, r in self.of_kind("veth"):
            name, net = r.get("name"), nets.get(r.get("instance"))
            if net is None or name != net.host_veth:
                want = (
                    net.host_veth
                    if net
                    else _one_of(
                        [n.host_veth for n in plan.instances], "the veth of a recorded instance (there is none)"
                    )
                )
                self.bad(
                    i,
                    f"veth record {name!r}: not a veth of run {self.run_id} (instance "
                    f"{r.get('instance')}); expected {want}",
                )
        for i, r in self.of_kind("bridge"):
            if r.get("name") != plan.bridge:
                self.bad(
                    i, f"bridge record {r.get('name')!r}: not the bridge of run {self.run_id}; expected {plan.bridge}"
                )
        for i, r in self.of_kind("fw_accept"):
            if r.get("bridge") != plan.bridge or not isinstance(r.get("tag"), str):
                self.bad(
                    i,
                    f"fw_accept record for bridge {r.get('bridge')!r}: not the bridge of run "
                    f"{self.run_id}; expected {plan.bridge} and a tag",
                )

    def check_files(self) -> None:
        hosts = [str(hosts_file(name)) for name in self.netns]
        for i, r in self.of_kind("hosts"):
            if r.get("path") not in hosts:
                self.bad(
                    i,
                    f"hosts record {r.get('path')!r}: not a hosts file of run {self.run_id}; "
                    f"expected {_one_of(hosts, 'the hosts file of a recorded namespace (there is none)')}",
                )
        pins = pin_dir(self.run_id)
        for i, r in self.of_kind("bpf_pin"):
            path = r.get("path")
            name = Path(path).name if isinstance(path, str) else ""
            if not (_PLAIN_NAME.match(name) and name not in (".", "..") and path == str(pins / name)):
                self.bad(i, f"bpf_pin record {path!r}: not in run {self.run_id}'s pin directory; expected {pins}/NAME")

    def check_cgroups(self) -> None:
        found = self.of_kind("cgroup")
        if found and self.layout is None:
            self.layout = detect()
        instances = set(self.netns.values())
        for i, r in found:
            why = record_problem(r, self.run_id, instances, self.layout) if self.layout else None
            if why:
                self.bad(i, why)

    def check_processes(self) -> None:
        for i, r in self.of_kind("process"):
            pid, start, instance = r.get("pid"), r.get("start_time"), r.get("instance")
            ns = netns_name(self.run_id, instance) if isinstance(instance, str) else None
            said = f"process record pid {pid} (instance {instance})"
            if not _is_int(pid) or pid <= 1 or not (start is None or _is_int(start)):
                self.bad(i, f"{said}: expected a pid above 1 and its start time")
            elif ns not in self.netns:
                self.bad(i, f"{said}: the journal records no namespace for that instance")
            elif not same_process(pid, start) or netns_of_process(pid) is None:
                continue  # gone (or a recycled pid): nothing to kill, nothing to check
            elif ns not in self.inodes:
                self.bad(
                    i, f"{said}: the journal records no inode for {ns}, so the process cannot be shown to be the run's"
                )
            elif not in_run_netns(pid, ns, self.inodes[ns]):
                self.bad(
                    i, f"{said}: it is not in the run's namespace {ns}; a process the run did not start is never killed"
                )


def check_journal(records: list[dict], run_id: str, where: str = "journal", layout: Layout | None = None) -> list[str]:
    """Every record cleanup would act on that is not run `run_id`'s own, one
    line each (`where:LINE: what, and what was expected`).  `layout`: the
    host's cgroups, detected here if a record needs them."""
    check_run_id(run_id)
    return _Check(records, run_id, where, layout).run().problems if records else []


def plan_cleanup(
    records: list[dict], run_id: str | None = None, where: str = "journal", layout: Layout | None = None
) -> list[Step]:
    """What to undo, from a journal of run `run_id` (by default the one its
    first record names): processes first (a namespace with a live process
    in it would outlive its deletion), then BPF pins, links, the bridge,
    the namespaces and their hosts files, and last the control groups,
    instances' before the run's (`layout`: the host's cgroups, detected
    here if the journal has any).  Each step is idempotent: a thing
    already gone is skipped, so a cleanup can be repeated.  A journal with
    a record that is not the run's own is refused whole (see the module
    docstring)."""
    if not records or records[-1].get("kind") in END_KINDS:
        return []
    run_id = run_id if run_id is not None else str(records[0].get("run_id"))
    if layout is None and any(r.get("kind") == "cgroup" for r in records):
        layout = detect()
    problems = check_journal(records, run_id, where, layout)
    if problems:
        more = len(problems) - 1
        raise CollapsarError(problems[0] + (f" (and {more} more refused record{'s' * (more > 1)})" if more else ""))
    by_kind: dict[str, list[dict]] = {}
    for record in records:
        by_kind.setdefault(record.get("kind", ""), []).append(record)
    inodes = {r["name"]: r["inode"] for r in by_kind.get("netns_inode", [])}
    steps = []
    for r in by_kind.get("process", []):
        ns = netns_name(run_id, r["instance"])
        if ns in inodes:  # without a known namespace inode it cannot be shown to be ours
            steps.append(
                Step(
                    "kill",
                    {
                        "pid": r["pid"],
                        "start_time": r.get("start_time"),
                        "instance": r["instance"],
                        "netns": ns,
                        "inode": inodes[ns],
                    },
                )
            )
    steps += [Step("kill_netns", {"netns": r["name"], "inode": r["inode"]}) for r in by_kind.get("netns_inode", [])]
    steps += [Step("unpin", {"path": r["path"]}) for r in by_kind.get("bpf_pin", [])]
    steps += [Step("del_link", {"name": r["name"]}) for r in reversed(by_kind.get("veth", []))]
    steps += [Step("del_link", {"name": r["name"]}) for r in by_kind.get("bridge", [])]
    steps += [Step("del_fw", {"bridge": r["bridge"], "tag": r["tag"]}) for r in by_kind.get("fw_accept", [])]
    steps += [Step("del_netns", {"netns": r["name"]}) for r in reversed(by_kind.get("netns", []))]
    steps += [Step("rm_hosts", {"path": r["path"]}) for r in reversed(by_kind.get("hosts", []))]
    groups = [group_to_remove(r, run_id, layout) for r in reversed(by_kind.get("cgroup", []))] if layout else []
    steps += [Step("rm_cgroup", {"path": str(group)}) for group in dict.fromkeys(groups) if group is not None]
    return steps


def find_run(target: str, state: Path | None = None) -> tuple[str, Path | None]:
    """The run id and journal that `collapsar cleanup TARGET` means.

    A run id is looked up in STATE/journals only, never as a path (a
    journal in the current directory is nobody's).  Any other TARGET must
    be the run directory of a run that STATE/index names; for one that has
    ended and left the state directory, the journal is None (nothing left:
    its copy in the run directory is read only to say so)."""
    state = state or state_dir()
    runs = list_runs(state)
    known = ", ".join(runs) or "none"
    missing = CollapsarError(
        f"cleanup {target}: no such run; expected a run id from {state / 'journals'} "
        f"(active or stale: {known}) or the directory of one of those runs"
    )
    if is_run_id(target):
        if target in runs:
            return target, runs[target]
        raise missing
    try:
        itself = os.stat(target)
    except OSError:
        raise missing from None
    for run_id, journal in runs.items():
        try:
            indexed = os.stat(state / "index" / run_id)
        except OSError:
            continue
        if (indexed.st_dev, indexed.st_ino) == (itself.st_dev, itself.st_ino):
            return run_id, journal
    ended = _ended_run(Path(target) / JOURNAL)
    if ended:
        return ended, None
    raise CollapsarError(
        f"cleanup {target}: {Path(target).resolve()} is not the run directory of any run "
        f"in {state / 'index'}; cleanup reads journals only from {state / 'journals'}"
    )


def _ended_run(copy: Path) -> str | None:
    try:
        records = read_journal(copy)
    except CollapsarError:
        return None
    if len(records) < 2 or records[-1].get("kind") not in END_KINDS:
        return None
    run_id = records[0].get("run_id")
    return run_id if isinstance(run_id, str) and is_run_id(run_id) else None
