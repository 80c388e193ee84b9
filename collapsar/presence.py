"""What is present when: events checked and resolved in time order.

`resolve` replays the pending events sorted by time (stable in file order)
over the state at t=0 and turns each into the model's event, or reports why
it cannot happen then: a leave of a service with no instance up, a join of a
link that is up, a set on a link that has left, ...

It also fixes *which* instances an event acts on, so that every consumer
(timeline, managers, dashboard) agrees: a join creates the next free indices
(`web`, `web-2`, ...; an index is never reused); leave, crash and disconnect
default to every eligible instance, and `amount: N` draws N of them from a
`random.Random` stream seeded with the experiment seed and used for nothing
else, so the choice depends only on the seed and the events before it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Literal, TypeVar, cast

from collapsar.errors import Where
from collapsar.model import (
    BridgeEvent,
    Event,
    LinkEvent,
    LinkProps,
    LinkSetEvent,
    LinkSpec,
    PartitionEvent,
    ServiceAction,
    ServiceEvent,
    instance_name,
)
from collapsar.parse_common import Elements, Report
from collapsar.parse_link_props import DIRECTIONS, Direction, PropValues, check_props
from collapsar.parse_links import build_spec
from collapsar.units import format_duration_us


@dataclass
class Pending:
    """One event as read, before the time-ordered checks."""

    at_us: int
    kind: str  # service | instance | bridge | link | set | partition
    action: str
    line: int
    label: str
    service: str | None = None
    instances: tuple[str, ...] = ()
    amount: int | None = None
    bridge: str | None = None
    pair: tuple[str, str] | None = None
    new_link: tuple[PropValues, bool] | None = None  # a join that creates a link
    changes: PropValues | None = None
    groups: tuple[frozenset[str], ...] = ()


_T = TypeVar("_T")
# A Pending's action is one its kind allows: parse_events read it with that
# kind's choices.  The casts below state that for the event it becomes.
_JoinLeave = Literal["join", "leave"]


def _given(value: _T | None, what: str) -> _T:
    """A field parse_events always sets for this kind of Pending."""
    assert value is not None, f"a pending event without its {what}"
    return value


def fmt_time(at_us: int) -> str:
    return format_duration_us(at_us) if at_us else "0s"


@dataclass
class _Instances:
    next_index: int
    present: list[str]  # in index order
    disconnected: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)


@dataclass
class _Link:
    spec: LinkSpec
    up_since: bool = True
    left_at: int = 0


def resolve(
    report: Report, pending: list[Pending], elements: Elements, links: list[LinkSpec], seed: int
) -> list[Event]:
    return _Replay(report, elements, links, seed).run(pending)


class _Replay:
    def __init__(self, report: Report, elements: Elements, links: list[LinkSpec], seed: int):
        self.report = report
        self.rng = random.Random(seed)
        self.instances = {
            name: _Instances(service.replicas + 1, [instance_name(name, i) for i in range(1, service.replicas + 1)])
            for name, service in elements.services.items()
        }
        self.bridges_left: dict[str, int] = {}
        self.links = {spec.key: _Link(spec) for spec in links}
        self.partitions: set[tuple[frozenset[str], ...]] = set()

    def fail(self, p: Pending, reason: str) -> None:
        self.report.add(p.line, f"{p.label}: cannot {p.action} at {fmt_time(p.at_us)}: {reason}")

    def run(self, pending: list[Pending]) -> list[Event]:
        handlers = {
            "service": self.service,
            "instance": self.instance,
            "bridge": self.bridge,
            "link": self.link,
            "set": self.set,
            "partition": self.partition,
        }
        events = []
        for p in sorted(pending, key=attrgetter("at_us")):
            event = handlers[p.kind](p)
            if event is not None:
                events.append(event)
        return events

    # ---- services ----------------------------------------------------------

    def _eligible(self, state: _Instances, action: str) -> list[str]:
        if action == "disconnect":
            return [name for name in state.present if name not in state.disconnected]
        if action == "reconnect":
            return [name for name in state.present if name in state.disconnected]
        return list(state.present)

    def service(self, p: Pending) -> ServiceEvent | None:
        service = _given(p.service, "service")
        state = self.instances[service]
        if p.action == "join":
            count = p.amount or 1
            targets = [instance_name(service, state.next_index + i) for i in range(count)]
            state.next_index += count
            state.present.extend(targets)
            return self._event(p, targets)
        eligible = self._eligible(state, p.action)
        what = {"disconnect": "connected and up", "reconnect": "disconnected"}.get(p.action, "up")
        if not eligible:
            self.fail(p, f"no instance of {p.service} is {what}")
            return None
        if p.amount is not None and p.amount > len(eligible):
            verb = "is" if len(eligible) == 1 else "are"
            self.report.add(
                p.line,
                f"{p.label}: cannot {p.action} {p.amount} instances at "
                f"{fmt_time(p.at_us)}: only {len(eligible)} {verb} {what}",
            )
            return None
        targets = eligible
        if p.amount is not None and p.amount < len(eligible):
            chosen = set(self.rng.sample(eligible, p.amount))
            targets = [name for name in eligible if name in chosen]
        self._apply(state, p.action, targets)
        return self._event(p, targets)

    def instance(self, p: Pending) -> ServiceEvent | None:
        state = self.instances[_given(p.service, "service")]
        eligible = self._eligible(state, p.action)
        for name in p.instances:
            if name not in eligible:
                self.fail(p, self._why_not(state, name, p.action))
                return None
        self._apply(state, p.action, list(p.instances))
        return self._event(p, list(p.instances))

    def _why_not(self, state: _Instances, name: str, action: str) -> str:
        if name in state.gone:
            return f"{name} is gone (it left or crashed before)"
        if name not in state.present:
            return f"{name} has not joined yet"
        if action == "disconnect":
            return f"{name} is already disconnected"
        return f"{name} is not disconnected"

    def _apply(self, state: _Instances, action: str, targets: list[str]) -> None:
        if action == "disconnect":
            state.disconnected.update(targets)
        elif action == "reconnect":
            state.disconnected.difference_update(targets)
        else:
            state.present = [name for name in state.present if name not in targets]
            state.disconnected.difference_update(targets)
            state.gone.update(targets)

    def _event(self, p: Pending, targets: list[str]) -> ServiceEvent:
        return ServiceEvent(
            p.at_us,
            _given(p.service, "service"),
            cast(ServiceAction, p.action),
            tuple(targets),
            self.report.where(p.line),
        )

    # ---- bridges -----------------------------------------------------------

    def bridge(self, p: Pending) -> BridgeEvent | None:
        bridge = _given(p.bridge, "bridge")
        left_at = self.bridges_left.get(bridge)
        if p.action == "leave" and left_at is not None:
            self.fail(p, f"it already left at {fmt_time(left_at)}")
            return None
        if p.action == "join" and left_at is None:
            self.fail(p, "it is already up")
            return None
        if p.action == "leave":
            self.bridges_left[bridge] = p.at_us
        else:
            del self.bridges_left[bridge]
        return BridgeEvent(p.at_us, bridge, cast(_JoinLeave, p.action), self.report.where(p.line))

    # ---- links -------------------------------------------------------------

    def _existing(self, p: Pending) -> _Link | None:
        pair = _given(p.pair, "pair")
        link = self.links.get(frozenset(pair))
        if link is None:
            a, b = pair
            hint = "; give the join properties (latency, bandwidth, ...) to create it" if p.action == "join" else ""
            self.fail(p, f"there is no link between {a} and {b}{hint}")
        return link

    def link(self, p: Pending) -> LinkEvent | None:
        where = self.report.where(p.line)
        if p.new_link is not None:
            return self._create(p, where)
        link = self._existing(p)
        if link is None:
            return None
        if p.action == "leave" and not link.up_since:
            self.fail(p, f"the link already left at {fmt_time(link.left_at)}")
            return None
        if p.action == "join" and link.up_since:
            self.fail(p, "the link is already up")
            return None
        link.up_since, link.left_at = p.action == "join", p.at_us
        return LinkEvent(p.at_us, link.spec.a, link.spec.b, cast(_JoinLeave, p.action), None, where)

    def _create(self, p: Pending, where: Where) -> LinkEvent | None:
        pair = _given(p.pair, "pair")
        existing = self.links.get(frozenset(pair))
        if existing is not None:
            line = existing.spec.where.line if existing.spec.where else "?"
            self.fail(
                p,
                f"a link between {pair[0]} and {pair[1]} already exists (line "
                f"{line}); a join with properties creates a new link",
            )
            return None
        values, one_way = _given(p.new_link, "new link")
        spec = build_spec(self.report, *pair, values, one_way, p.label, where)
        if spec is None:
            return None
        self.links[spec.key] = _Link(spec)
        return LinkEvent(p.at_us, spec.a, spec.b, "join", spec, where)

    def set(self, p: Pending) -> LinkSetEvent | None:
        link = self._existing(p)
        if link is None:
            return None
        if not link.up_since:
            self.fail(p, f"the link left at {fmt_time(link.left_at)}; it must join first")
            return None
        spec, values = link.spec, _given(p.changes, "changes")
        # Directions as the event names them (`up` from its first name), so
        # that messages say what the user wrote.
        reverse = p.pair != (spec.a, spec.b)
        forward: Direction = "down" if reverse else "up"  # the direction from spec.a to spec.b
        backward: Direction = "up" if reverse else "down"
        now: dict[Direction, LinkProps | None] = {forward: spec.up, backward: spec.down}
        missing = [d for d in DIRECTIONS if now[d] is None]
        if missing and values.under(missing[0]).values:
            self.report.add(
                p.line,
                f"{p.label}: the link is one-way from {spec.a} to {spec.b}; "
                f"set it without up and down, or with up on [{spec.a}, {spec.b}]",
            )
            return None
        written = {d: values.toward(d) for d in DIRECTIONS if d not in missing}
        new = {d: props.changed(written[d].shaping()) for d in DIRECTIONS if (props := now[d]) is not None}
        if not check_props(self.report, written, new, p.label, p.line):
            return None
        link.spec = replace(spec, up=new[forward], down=new.get(backward))
        changes = {d: w.shaping() for d, w in written.items()}
        return LinkSetEvent(
            p.at_us, spec.a, spec.b, changes[forward], changes.get(backward, {}), self.report.where(p.line)
        )

    # ---- partitions --------------------------------------------------------

    def partition(self, p: Pending) -> PartitionEvent | None:
        key = tuple(sorted(p.groups, key=sorted))
        if p.action == "start" and key in self.partitions:
            self.fail(p, "the same partition is already in effect")
            return None
        if p.action == "heal" and key not in self.partitions:
            self.fail(p, "no partition with these groups is in effect")
            return None
        if p.action == "start":
            self.partitions.add(key)
        else:
            self.partitions.discard(key)
        return PartitionEvent(p.at_us, p.groups, cast(Literal["start", "heal"], p.action), self.report.where(p.line))
