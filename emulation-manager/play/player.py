"""Play a precomputed timeline: at each step's time, apply what changed.

The timeline (collapsar.timeline) already holds the full collapsed state after
every event, and the set of (src, dst) pairs whose path changed, so a step
costs only its diff: changed paths go to the emulation cores, joins start
commands, leaves and crashes stop them.  `plan_step` is pure (tested without
a kernel); `Player` binds it to an `Actuator` and a `Scheduler`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from collapsar.manager.play.scheduler import Fired, Scheduler
from collapsar.model import BridgeEvent, LinkEvent, LinkSetEvent, PartitionEvent, Path, ServiceEvent, shaping_values

# A step that changes at least this many of one source's paths is a bulk
# change (a link every path across it shares), worth keeping the
# destinations it changes alike together in the source's tree.
BULK_CHANGE = 16
HOT_DESTINATIONS = 32  # destinations given a class of their own in every tree, at most


class Actuator(Protocol):
    """What the player drives.  Optional attributes: `prepare_ahead_ns` (the
    actuator only queues on the step being prepared, so steps may be prepared
    that long before their time, see Scheduler), `step_lock` (held from a
    step's preparation until it has fired) and `guard` (see set_all_paths)."""

    def set_paths(self, src: str, paths: dict[str, Path | None]) -> None: ...
    def start_instance(self, instance: str) -> None: ...
    def stop_instance(self, instance: str) -> None: ...
    def kill_instance(self, instance: str) -> None: ...
    def mark_instance(self, instance: str, status: str) -> None: ...


@dataclass
class StepPlan:
    """What one timeline step asks of this host, in the order to apply it."""

    stop: list[str] = field(default_factory=list)  # leave: SIGTERM then SIGKILL
    kill: list[str] = field(default_factory=list)  # crash: SIGKILL
    paths: dict[str, dict[str, Path | None]] = field(default_factory=dict)  # src -> dst -> path
    start: list[str] = field(default_factory=list)  # join: start the command
    marks: dict[str, str] = field(default_factory=dict)  # instance -> up | disconnected
    # Instances no other instance reaches from this step on (guard on), and
    # those reached again (guard off): collapsar.tcal.guard.
    cut_off: list[str] = field(default_factory=list)
    reached: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.stop or self.kill or self.paths or self.start or self.marks)

    @property
    def weight(self) -> int:
        """About the step's preparation in microseconds (see Scheduler):
        each source whose paths change (100; 30 where they change only
        towards instances whose guard goes on or off: its tree is not
        touched), and each path.  Measured at 400 instances: 130 us per
        source of a link change, 16-47 us per source of a guarded join,
        disconnect or reconnect."""
        guarded = set(self.cut_off) | set(self.reached)
        sources = sum(30 if paths.keys() <= guarded else 100 for paths in self.paths.values())
        return sources + sum(map(len, self.paths.values()))


def plan_step(prev_state, step, local: set[str] | None = None) -> StepPlan:
    """Compare two consecutive states.  `local`: instances on this host (None:
    all); only their processes and their egress paths are ours to touch."""
    mine = (lambda name: True) if local is None else local.__contains__
    before = set(prev_state.instances)
    after = set(step.state.instances)
    crashed = {
        target
        for event in step.events
        if isinstance(event, ServiceEvent) and event.action == "crash"
        for target in event.targets
    }
    plan = StepPlan()
    for instance in sorted(before - after):
        if mine(instance):
            (plan.kill if instance in crashed else plan.stop).append(instance)
    for instance in step.state.instances:
        if instance not in before and mine(instance):
            plan.start.append(instance)
    for instance in step.state.instances:
        if instance in before and mine(instance):
            status = step.state.status(instance)
            if status != prev_state.status(instance):
                plan.marks[instance] = status
    for src, dst in sorted(step.changed):
        if mine(src):
            plan.paths.setdefault(src, {})[dst] = step.state.path(src, dst)
    if local is None:  # every source is here: who no one reaches is known
        plan.cut_off, plan.reached = guard_changes(prev_state, step.state, plan.paths)
    return plan


def guard_changes(before, after, paths: dict[str, dict[str, Path | None]]) -> tuple[list[str], list[str]]:
    """Between two states, given the paths that changed (src -> dst ->
    path): the instances no one reaches any more, and those reached again."""
    lost = {dst for changed in paths.values() for dst, path in changed.items() if path is None}
    found = {dst for changed in paths.values() for dst, path in changed.items() if path is not None}
    return sorted(after.cut_off(lost) - before.cut_off(lost)), sorted(before.cut_off(found))


def lineages(plans: Sequence[StepPlan]) -> dict[str, dict[str, Hashable]]:
    """src -> dst -> what the pair's path goes through in the run's bulk
    changes: (step, shaping values, or None when cut) for each such step.

    Destinations of one source with the same lineage (and the same record
    at t=0) change alike at every bulk step, so a tree that keeps them in
    one class changes that class in place (collapsar.tcal.active) instead
    of moving each.  Two kinds of step are bulk for a pair:
    - the step changes at least BULK_CHANGE of the source's paths (a link
      that many paths share: the middle of a topology);
    - the step gives the destination new values (not a cut, nor a restore)
      on its paths from at least BULK_CHANGE sources (its own link changed:
      every tree changes it), for the HOT_DESTINATIONS destinations with the
      most such steps.
    Steps that change a few paths are left out, and the hot destinations are
    capped: otherwise churn would give every destination a class of its own
    in every tree, the N^2 classes the active tree exists to avoid.  Pairs
    without bulk changes are absent."""
    hot_by_step: list[set[str]] = []
    hot_steps: dict[str, int] = {}
    cut: set[tuple[str, str]] = set()  # pairs cut by an earlier step: coming back is a restore, not new values
    for plan in plans:
        sources: Counter[str] = Counter()
        for src, paths in plan.paths.items():
            for dst, path in paths.items():
                if path is None:
                    cut.add((src, dst))
                elif (src, dst) in cut:
                    cut.discard((src, dst))
                else:
                    sources[dst] += 1
        hot = {dst for dst, count in sources.items() if count >= BULK_CHANGE}
        hot_by_step.append(hot)
        for dst in hot:
            hot_steps[dst] = hot_steps.get(dst, 0) + 1
    kept = set(sorted(hot_steps, key=lambda dst: (-hot_steps[dst], dst))[:HOT_DESTINATIONS])
    out: dict[str, dict[str, list]] = {}
    for index, (plan, hot) in enumerate(zip(plans, hot_by_step), 1):
        hot &= kept
        for src, paths in plan.paths.items():
            dsts = paths.keys() if len(paths) >= BULK_CHANGE else hot & paths.keys()
            if not dsts:
                continue
            mine = out.setdefault(src, {})
            for dst in dsts:
                path = paths[dst]
                mine.setdefault(dst, []).append((index, None if path is None else shaping_values(path)))
    return {src: {dst: tuple(steps) for dst, steps in dsts.items()} for src, dsts in out.items()}


def first_paths(plans: Sequence[StepPlan], dsts: AbstractSet[str]) -> dict[str, dict[str, Path]]:
    """src -> dst -> the first path to each of `dsts` (instances without
    one at t=0) that a later step gives it: a class made with it at t=0
    needs no change when it comes."""
    out: dict[str, dict[str, Path]] = {}
    for plan in plans:
        for src, paths in plan.paths.items():
            for dst in paths.keys() & dsts:
                path = paths[dst]
                if path is not None:
                    out.setdefault(src, {}).setdefault(dst, path)
    return out


def set_all_paths(
    actuator: Actuator, paths: dict[str, dict[str, Path | None]], cut_off: list[str], reached: list[str]
) -> None:
    """Every source's changed paths.  An actuator with `guard(cut_off,
    reached)` is told first which instances no one reaches from now on and
    which are reached again, and calls what that returns (if anything)
    after the paths: every tree's changes go before a guard is lifted."""
    guard = getattr(actuator, "guard", None)
    finish = guard(cut_off, reached) if guard is not None and (cut_off or reached) else None
    for src, changed in paths.items():
        actuator.set_paths(src, changed)
    if finish is not None:
        finish()


def describe_event(event) -> str:
    if isinstance(event, ServiceEvent):
        return f"{event.service} {event.action} [{', '.join(event.targets)}]"
    if isinstance(event, BridgeEvent):
        return f"bridge {event.bridge} {event.action}"
    if isinstance(event, LinkSetEvent):
        return f"link {event.a} -- {event.b} set"
    if isinstance(event, LinkEvent):
        return f"link {event.a} -- {event.b} {event.action}"
    if isinstance(event, PartitionEvent):
        groups = " | ".join(",".join(sorted(group)) for group in event.groups)
        return f"partition {event.action} {groups}"
    return type(event).__name__


def apply_plan(plan: StepPlan, actuator: Actuator):
    """Processes that go are signalled before their paths are cut; paths of
    joining instances are in place before their commands start.  Returns the
    starting of joined commands as a follow-up (see Scheduler.run): the step
    is in force once the network is, and a fork+exec should not count as
    lateness of the emulated network."""
    for instance in plan.kill:
        actuator.kill_instance(instance)
    for instance in plan.stop:
        actuator.stop_instance(instance)
    set_all_paths(actuator, plan.paths, plan.cut_off, plan.reached)
    for instance, status in plan.marks.items():
        actuator.mark_instance(instance, status)
    if not plan.start:
        return None

    def start_joined() -> None:
        for instance in plan.start:
            actuator.start_instance(instance)

    return start_joined


class Player:
    """Runs the timeline's steps after t=0 on their own thread."""

    def __init__(self, timeline, actuator: Actuator, local: set[str] | None = None):
        self.timeline = timeline
        self.actuator = actuator
        steps = timeline.steps
        entries = []
        self.plans: list[StepPlan] = []  # one per step after the first
        self.last_start_us = 0  # time of the last step that starts an instance
        for i in range(1, len(steps)):
            plan = plan_step(steps[i - 1].state, steps[i], local)
            self.plans.append(plan)
            label = "; ".join(describe_event(e) for e in steps[i].events) or f"step {i}"
            entries.append((steps[i].at_us, label, self._bind(plan)))
            if plan.start:
                self.last_start_us = steps[i].at_us
        self.scheduler = Scheduler(
            entries,
            prepare_ahead_ns=getattr(actuator, "prepare_ahead_ns", 0),
            hold=getattr(actuator, "step_lock", None),
            weights=[plan.weight for plan in self.plans],
        )

    def _bind(self, plan: StepPlan):
        return lambda: apply_plan(plan, self.actuator)

    @property
    def log(self) -> list[Fired]:
        return list(self.scheduler.log)

    @property
    def pending(self) -> int:
        return self.scheduler.pending

    @property
    def last_at_us(self) -> int:
        steps = self.timeline.steps
        return steps[-1].at_us if steps else 0

    def start(self) -> int:
        """Start playing; returns t=0 (monotonic ns)."""
        return self.scheduler.start()

    def stop(self) -> None:
        self.scheduler.stop()
        self.scheduler.join()
