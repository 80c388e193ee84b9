"""The validated experiment: plain, immutable data with units in field names.

The parser (`collapsar.parser`, `collapsar.kollaps_xml`) produces an
`Experiment`; `collapsar.collapse` and `collapsar.timeline` turn it into
`Path`s; every other component only reads these types.  Nothing here parses,
validates or touches the system.

Vocabulary:
- an *element* is a service or a bridge, named in the file;
- an *instance* is one running replica of a service: `web`, `web-2`, `web-3`
  (index 1 carries the bare service name, so a one-replica service's instance
  is called like the service);
- a *link* as the user writes it is a `LinkSpec` between two elements; the
  collapse stage expands it into unidirectional instance-level links with
  integer ids (`LinkId`) that the sharing model exchanges between hosts;
- a *path* is the collapsed end-to-end route from one instance to another.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from collapsar.egress import EgressBucket
from collapsar.errors import CollapsarError, Where
from collapsar.impairments import EXTRA_FIELDS, NO_EXTRAS, Extras
from collapsar.trafficclasses import TrafficClasses

# The shapes netem's jitter can take (collapsar.tcal.dist makes each one's table).
JitterDistribution = Literal["normal", "pareto", "paretonormal", "uniform"]
DISTRIBUTIONS: tuple[JitterDistribution, ...] = get_args(JitterDistribution)
PathMetric = Literal["latency", "hops"]

DEFAULT_PERIOD_US = 50_000


CongestionControl = Literal["reno", "cubic", "bbr"]
CONGESTION_CONTROLS: tuple[CongestionControl, ...] = ("reno", "cubic", "bbr")
HOST_CONGESTION_CONTROL = "/proc/sys/net/ipv4/tcp_congestion_control"


@functools.cache
def host_congestion_control() -> str | None:
    """The congestion control this host's new network namespaces start with (its default)."""
    try:
        with open(HOST_CONGESTION_CONTROL) as file:
            return file.read().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Settings:
    """The `experiment:` block."""

    name: str
    period_us: int = DEFAULT_PERIOD_US
    path_metric: PathMetric = "latency"
    seed: int = 0
    # Charge Ethernet's preamble, frame check and inter-frame gap so that goodput
    # matches a real link of the configured rate (see collapsar.tcal).
    wire_overhead: bool = True
    # Jitter keeps packets in order on every link that does not say (`in-order`).
    in_order: bool = False
    # The TCP congestion control every instance uses (net.ipv4.tcp_congestion_control
    # in its namespace or container); None: the host's default.  The sharing model
    # weighs flows by it (collapsar.manager.sharing.model.RTT_EXPONENT).
    congestion_control: CongestionControl | None = None
    where: Where | None = None


@dataclass(frozen=True)
class CommandOrigin:
    """Where a service's command is written: under `command:`, or under
    `workload:`, the YAML form the parser compiles into an argv
    (collapsar.parse_workload).  Checks of the command that happen after
    parsing, such as validate's chain check, name this place."""

    key: Literal["command", "workload"]
    where: Where | None = None


@dataclass(frozen=True)
class Service:
    name: str
    command: tuple[str, ...] = ()
    image: str | None = None
    replicas: int = 1  # instances present at t=0 (may be 0: joined by an event)
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    cpus: float | None = None
    cpuset: tuple[int, ...] | None = None  # the CPU numbers its instances may run on, sorted
    cpu_speed: float | None = None  # each core this times as fast as the host's (collapsar.cpuspeed)
    memory_bytes: int | None = None
    egress: EgressBucket | None = None  # a token bucket over each instance's egress (collapsar.egress)
    traffic_classes: TrafficClasses | None = None  # priority classes of its traffic (collapsar.trafficclasses)
    where: Where | None = None
    # Not compared: a command compiled from `workload:` is the same service
    # as one that writes that argv under `command:`.
    command_origin: CommandOrigin | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Bridge:
    name: str
    where: Where | None = None


class ShapingRules:
    """What follows from the shaping fields, for every record that carries
    them: LinkProps, Path and collapsar.tcal.Shaping."""

    delay_us: int
    jitter_us: int
    loss_ratio: float
    extras: Extras

    @property
    def needs_netem(self) -> bool:
        """Delay, jitter, loss, reordering, duplication and corruption need
        sch_netem; a rate and a queue alone are htb's and a pfifo's."""
        return bool(self.delay_us or self.jitter_us or self.loss_ratio or self.extras.needs_netem)

    @property
    def jitter_lacks_delay(self) -> bool:
        """Jitter varies the delay around its mean: with no delay there is
        nothing to vary, and netem would clip every negative draw to zero."""
        return bool(self.jitter_us) and not self.delay_us


@dataclass(frozen=True)
class LinkProps(ShapingRules):
    """The shaping record: what one direction of a link does to packets.

    The same record describes a collapsed path (`Path.props`) and what one
    destination's tc class holds (`collapsar.tcal.Shaping` carries these
    fields for an address); its fields are the shaping fields everywhere
    (`SHAPING_FIELDS`)."""

    delay_us: int = 0
    jitter_us: int = 0
    distribution: JitterDistribution = "normal"
    loss_ratio: float = 0.0  # with a loss model, its stationary rate
    rate_bps: int | None = None  # None: not limited by this link
    extras: Extras = NO_EXTRAS  # burst loss, reordering, ... (collapsar.impairments)

    def changed(self, changes: Mapping[str, Any]) -> LinkProps:
        """This record with `changes` applied: shaping fields (SHAPING_FIELDS)
        and the fields of its extras (EXTRA_FIELDS), by name."""
        extra = {name: value for name, value in changes.items() if name in EXTRA_FIELDS}
        own = {name: value for name, value in changes.items() if name not in EXTRA_FIELDS}
        if extra:
            own["extras"] = replace(self.extras, **extra)
        return replace(self, **own)


SHAPING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LinkProps))

# The shaping values of a record, a path or a tc destination, as one tuple
# (attrgetter is C: a link change at 400 instances compares 80,000 of them).
shaping_values = operator.attrgetter(*SHAPING_FIELDS)


@dataclass(frozen=True)
class LinkSpec:
    """A link as written: `up` carries a -> b, `down` carries b -> a."""

    a: str
    b: str
    up: LinkProps
    down: LinkProps | None  # None for `direction: one-way`
    where: Where | None = None

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


# ---- events ---------------------------------------------------------------

ServiceAction = Literal["join", "leave", "crash", "disconnect", "reconnect"]


@dataclass(frozen=True)
class ServiceEvent:
    """Acts on instances of `service`.  The user writes an `amount` or names one
    instance; the parser resolves that (deterministically from the seed) into
    `targets`, the exact instance names acted on, so every consumer agrees."""

    at_us: int
    service: str
    action: ServiceAction
    targets: tuple[str, ...]
    where: Where | None = None


@dataclass(frozen=True)
class BridgeEvent:
    at_us: int
    bridge: str
    action: Literal["join", "leave"]
    where: Where | None = None


@dataclass(frozen=True)
class LinkEvent:
    """A link leaves, rejoins, or (join with `spec`) is created."""

    at_us: int
    a: str
    b: str
    action: Literal["join", "leave"]
    spec: LinkSpec | None = None
    where: Where | None = None


@dataclass(frozen=True)
class LinkSetEvent:
    """Changes properties of an existing link; `up`/`down` hold only the fields
    that change, by shaping field name (SHAPING_FIELDS, e.g. {"delay_us": 20000},
    or EXTRA_FIELDS, e.g. {"reorder_ratio": 0.01}: see `LinkProps.changed`)."""

    at_us: int
    a: str
    b: str
    up: Mapping[str, int | float | str]
    down: Mapping[str, int | float | str]
    where: Where | None = None


@dataclass(frozen=True)
class PartitionEvent:
    """Cuts (or heals) every path between instances of different groups."""

    at_us: int
    groups: tuple[frozenset[str], ...]  # service names
    action: Literal["start", "heal"]
    where: Where | None = None


Event = ServiceEvent | BridgeEvent | LinkEvent | LinkSetEvent | PartitionEvent


@dataclass(frozen=True)
class LinkTrace:
    """A link whose bandwidth, latency or loss follow a trace file
    (collapsar.linktraces): what `collapsar collapse` and the dry run show."""

    a: str
    b: str
    directions: tuple[Literal["up", "down"], ...]  # up: a -> b
    file: str  # as messages name it
    format: Literal["csv", "mahimahi"]
    fields: tuple[str, ...]  # the shaping fields it sets
    step_us: int
    at_us: int
    steps: int  # steps played, repeats included
    changes: int  # LinkSetEvents it put in the events (a step at t=0 is in the link)
    loop: bool = False
    until_us: int | None = None
    empty_steps: int = 0  # Mahimahi steps without a delivery opportunity (run at one packet)
    where: Where | None = None


@dataclass(frozen=True)
class Experiment:
    """A whole validated experiment.  Events are sorted by time, stable in file
    order; sugar (`flap`, `partition` with `until`) is already expanded, and
    so are link traces: each step is a LinkSetEvent, `traces` says what they are."""

    settings: Settings
    services: tuple[Service, ...]
    bridges: tuple[Bridge, ...]
    links: tuple[LinkSpec, ...]
    events: tuple[Event, ...] = ()
    source: str = "<memory>"
    # Not compared: the steps are in `events`, and an experiment printed back
    # (collapsar.yamlout) writes them as `set` events.
    traces: tuple[LinkTrace, ...] = field(default=(), compare=False)

    def background_link(self) -> tuple[Where | None, str] | None:
        """Where a link first carries background traffic (its place and
        `link A -> B`), at the start or by an event; None if none does."""
        for spec in self.links:
            if any(p is not None and p.extras.background for p in (spec.up, spec.down)):
                return spec.where, f"link {spec.a} -> {spec.b}"
        for event in self.events:
            if isinstance(event, LinkEvent) and event.spec is not None:
                if any(p is not None and p.extras.background for p in (event.spec.up, event.spec.down)):
                    return event.where, f"link {event.a} -> {event.b}"
            if isinstance(event, LinkSetEvent) and any(c.get("background") for c in (event.up, event.down)):
                return event.where, f"link {event.a} -> {event.b}"
        return None

    def service(self, name: str) -> Service:
        for service in self.services:
            if service.name == name:
                return service
        raise KeyError(name)


# ---- collapsed ------------------------------------------------------------

LinkId = int


def instance_name(service: str, index: int) -> str:
    """Instance `index` (1-based) of `service`: web, web-2, web-3, ..."""
    return service if index == 1 else f"{service}-{index}"


_REPLICA = re.compile(r"^(.+)-([0-9]+)$")


def instance_parts(name: str) -> tuple[str, int] | None:
    """(service, index) when `name` is what instance_name gives a replica
    past the first (`web-3` -> ("web", 3)); None for any other name (`web`,
    `web-1`, `web-03`).  Whether that service exists is the caller's check."""
    match = _REPLICA.match(name)
    if match is None:
        return None
    service, index = match.group(1), int(match.group(2))
    return (service, index) if instance_name(service, index) == name else None


def service_of(experiment: Experiment, instance: str) -> str:
    """`web-3` -> `web` (instance names are service, service-2, ...)."""
    names = {service.name for service in experiment.services}
    if instance in names:
        return instance
    parts = instance_parts(instance)
    if parts is not None and parts[0] in names:
        return parts[0]
    raise CollapsarError(f"instance {instance}: belongs to no service of {experiment.source}")


@dataclass(frozen=True)
class Path(ShapingRules):
    """The collapsed route from one instance to another, in one direction.

    delay = sum of link delays; jitter = sqrt(sum of squared jitters);
    loss = 1 - prod(1 - loss_i); rate = min of link rates (None: unlimited).
    `link_ids` lists the unidirectional links crossed, in order.
    """

    src: str
    dst: str
    delay_us: int
    jitter_us: int
    loss_ratio: float
    rate_bps: int | None
    link_ids: tuple[LinkId, ...]
    distribution: JitterDistribution = "normal"
    extras: Extras = NO_EXTRAS

    @property
    def props(self) -> LinkProps:
        """The path's shaping, as one record."""
        return LinkProps(**{name: getattr(self, name) for name in SHAPING_FIELDS})

    @property
    def rtt_hint_us(self) -> int:
        """The RTT the Kollaps model assumes for sharing: twice the one-way delay."""
        return 2 * self.delay_us
