"""How long each timeline step of the events bench takes to prepare (Python)
and to put in force (kernel), with N instances' real trees but nothing else
running: no commands, no meter, no sharing loop competing for the
interpreter.  The trees (collapsar.tcal.active, as a run from 100 instances
uses) sit on veth interfaces in one scratch namespace, the guards on their
peers; each step is prepared inside a PreparedStep (queued) and fired at
once.

Reports per kind of step the median over --repeat runs of its preparation
and its application, beside the number of paths it changes.  Needs root.

    python bench/step_prep_bench.py --extra 388 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from events_bench import topology  # noqa: E402

from collapsar.manager.core import EmulationCore, guard_step  # noqa: E402
from collapsar.manager.experiment import all_instances, paths_from  # noqa: E402
from collapsar.manager.play.player import Player, apply_plan, describe_event, first_paths, lineages  # noqa: E402
from collapsar.parser import parse_text  # noqa: E402
from collapsar.tcal import Shaping  # noqa: E402
from collapsar.tcal.active import ActiveTcTree  # noqa: E402
from collapsar.tcal.guard import Guards  # noqa: E402
from collapsar.tcal.prepared import PreparedStep  # noqa: E402
from collapsar.timeline import build_timeline  # noqa: E402


class Trees:
    """The player's actuator: path changes to the cores, processes ignored;
    an instance no one reaches is cut by its guard, as a local run does
    (run/skeleton.py ManagerRun.guard)."""

    prepare_ahead_ns = 0

    def __init__(self, guards: Guards) -> None:
        self.cores: dict[str, EmulationCore] = {}
        self.guards = guards
        self.guarded: set[str] = set()

    def set_paths(self, src, paths) -> None:
        core = self.cores.get(src)
        if core is not None:
            core.apply(paths, self.guarded)

    def guard(self, cut_off, reached):
        return guard_step(self.guards, self.guarded, self.cores.values(), cut_off, reached)

    def start_instance(self, instance) -> None: ...
    def stop_instance(self, instance) -> None: ...
    def kill_instance(self, instance) -> None: ...
    def mark_instance(self, instance, status) -> None: ...


def one_run(extra: int) -> list[tuple[str, int, float, float]]:
    """(label, paths, prepare ms, apply ms) per step."""
    timeline = build_timeline(parse_text(topology(extra), "events-bench"))
    names = all_instances(timeline)
    ip_of = {name: f"10.79.{i // 250}.{i % 250 + 1}" for i, name in enumerate(names)}
    ns = f"cxprep{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        links = "\n".join(f"link add d{i} type veth peer name q{i}\nlink set d{i} up" for i in range(len(names)))
        subprocess.run(["ip", "-n", ns, "-batch", "-"], input=links, text=True, check=True)
        # q{i} stands for instance i's bridge port: its guard goes there.
        trees = Trees(Guards({name: f"q{i}" for i, name in enumerate(names)}, netns=ns))
        player = Player(timeline, trees)
        groups = lineages(player.plans)
        first = timeline.steps[0].state
        trees.guarded = first.cut_off(names)
        trees.guards.set(on=sorted(trees.guarded))
        future = first_paths(player.plans, trees.guarded)
        for i, name in enumerate(names):
            core = EmulationCore(name, f"d{i}", ns, ip_of, ActiveTcTree, Shaping, netem=False, wire_overhead=True)
            core.install(paths_from(first, name, names), groups.get(name), trees.guarded, future.get(name))
            trees.cores[name] = core
        out = []
        for plan, step in zip(player.plans, timeline.steps[1:]):
            prepared = PreparedStep(time.monotonic_ns())
            began = time.perf_counter()
            with prepared:
                apply_plan(plan, trees)
            prepared.seal()
            prepare_ms = (time.perf_counter() - began) * 1000
            started, applied, errors = prepared.fire()
            if errors:
                raise SystemExit(f"step at {step.at_us / 1e6:g}s failed: {errors[0]}")
            label = "; ".join(describe_event(e) for e in step.events)
            out.append((label, sum(map(len, plan.paths.values())), prepare_ms, (applied - started) / 1e6))
        trees.guards.close()
        return out
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def kind(label: str, paths: int) -> str:
    """A step's kind, without the instance it names."""
    words = label.split()
    if paths == 0:
        return "no path changes"
    if words[0] == "link":
        if words[-1] != "set":
            return f"link {words[-1]}"
        return "link across the middle set" if {"sw1", "sw2"} <= set(words) else "one instance's link set"
    if words[0] == "partition":
        return f"partition {words[1]}"
    return words[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, default=388, help="idle instances added to the bench's 12")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.extra) for _ in range(args.repeat)]
    by_kind: dict[str, list[tuple[int, float, float]]] = {}
    for run in runs:
        for label, paths, prepare_ms, apply_ms in run:
            by_kind.setdefault(kind(label, paths), []).append((paths, prepare_ms, apply_ms))
    print(f"{12 + args.extra} instances, {args.repeat} runs; medians per kind of step:")
    print(f"  {'step':32s} {'paths':>7s} {'prepare ms':>11s} {'apply ms':>9s}")
    for name, rows in sorted(by_kind.items(), key=lambda item: -statistics.median(r[1] for r in item[1])):
        paths = statistics.median(r[0] for r in rows)
        prepare = statistics.median(r[1] for r in rows)
        apply_ms = statistics.median(r[2] for r in rows)
        print(f"  {name:32s} {paths:7.0f} {prepare:11.2f} {apply_ms:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
