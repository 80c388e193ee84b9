"""The plan of a hop-by-hop reference network: what `reference_net` builds, decided without root.

Collapsar collapses a topology into one shaped path per instance pair.  The
reference does not: it builds the topology as written (Mininet's idea), so
that the two can be compared on the same experiment.  This module turns a
parsed `Experiment` into a `ReferencePlan`, pure data that unit tests check;
`reference_net` creates it in the kernel.

The network:
- one network namespace per node: every service instance (including those
  that join later) and every bridge.  Bridges route (ip_forward on);
  instances never forward, as in Collapsar, where a path never crosses an
  instance.  rp_filter is off everywhere: routes may be asymmetric.
- one veth pair per instance-level link (`collapsar.graph.RunGraph`), named
  `l<pair number>` at both ends (names are per namespace).
- addresses: each node has ONE address, 10.213.0.0/16 from its second host
  on, as a /32 on every one of its veths (an unnumbered router).  Routes
  name the next node's address with `onlink`, so neighbours answer ARP for
  it; a bridge's hop shows as that bridge's own address (ping -R).
- routes follow Collapsar's own shortest paths: for every path of
  `collapsar.collapse` (`link_ids`, in order), each node on it routes the
  destination's /32 to the next node.  Collapse picks a shortest-path tree
  per source, so where two sources tie differently through one node, that
  node routes those sources through per-source tables (`ip rule from`).
- each direction of a link is shaped on its sending veth: htb root with one
  class at the link's rate (`collapsar.tcal.plan.HtbCalculator`, wire
  overhead as the experiment says, so a rate means what it means in
  Collapsar), and under it the drop-tail queue: a pfifo, or the netem of the
  link's delay/jitter/loss, whose limit is that queue plus the packets in
  flight in its delay line.  A link without a rate gets a root netem only
  (Collapsar's default sizing), a link with neither nothing.

The queue (the bandwidth-delay product, Villamizar and Song's rule of
thumb that Mininet experiments use for a link's buffer): a direction of a
link is crossed by some collapsed paths; RTT_L is the longest round trip
among them (the path's delay plus its reverse path's), and the queue holds
RTT_L of full frames at the link's rate, at least MIN_QUEUE_PKTS:

    queue_pkts = max(MIN_QUEUE_PKTS, ceil(rate_bps x RTT_L / (8 x wire frame)))

The wire frame is 1538 bytes (1514 + preamble, FCS, gap) with wire overhead,
else 1514: a full queue then adds one RTT_L of delay, and a lone flow with
the longest RTT can keep the link busy through a loss (Reno halves its
window).  The floor matters where paths have almost no delay (this host's
links), where the rule gives a frame or two: ten absorb what a window sends
back to back.  A link's own `queue:` replaces the rule, in packets at the
link's rate as Collapsar counts it.  netem delays a packet before htb's
rate takes it (Mininet's order too) and holds the delay line in the same
queue as the backlog, so its limit adds the packets in flight along the
delay at the rate (Little's law), as Collapsar sizes a path with a
`queue`: the backlog outgrows the queue only when fewer packets than that
arrived during the last delay (a sender that paused).

Frames, not super-packets: every veth has gso_max_segs 1 (GSO_MAX_SEGS),
so TCP hands the qdiscs one frame per packet, as a real link carries them.
A pfifo and netem count packets, and a GSO packet forwarded through the
bridges stays whole: with Collapsar's rule (2-6 segments at these rates)
a 20-packet queue held about twice as many frames (measured in the VM: a
ping waited 75-100 ms behind a queue of 61.5 ms).  It costs CPU per frame,
which the modest rates a reference is built for can afford.

Refused, with one error naming the file and line: events other than
service joins, images, CPU and memory limits, and the impairments the
reference does not model yet (burst loss, reordering, duplication,
corruption, jitter kept in order).

`collapsar.collapse` and `collapsar.tcal` import numpy and scipy, which
cost a guest of the VM tier many seconds: they are imported only when a
plan is made.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import os
from collections import defaultdict
from dataclasses import dataclass, replace

from collapsar.errors import CollapsarError
from collapsar.model import Experiment, LinkProps, ServiceEvent

PREFIX = "cxref"  # namespaces cxref-<tag>-<node>; Collapsar's own are cx-<run id>-<instance>
DEFAULT_SUBNET = "10.213.0.0/16"
MIN_QUEUE_PKTS = 10
FRAME_BYTES = 1514  # a full frame as htb counts it (1500 MTU + Ethernet header)
WIRE_EXTRA_BYTES = 24  # preamble + SFD, FCS, inter-frame gap (collapsar.tcal.plan)
GSO_MAX_SEGS = 1  # one frame per packet on every veth (see above)
POLICY_TABLE_BASE = 100  # per-source routing tables, when a node needs them


@dataclass(frozen=True)
class Node:
    name: str  # a bridge or an instance
    kind: str  # "bridge" | "instance"
    netns: str
    ip: str


@dataclass(frozen=True)
class Hop:
    """One direction of one veth pair: what its sending end does."""

    link_id: int  # Collapsar's unidirectional link id
    src: str
    dst: str
    ifname: str  # the same name at both ends
    props: LinkProps
    rtt_us: int  # the longest round trip of the paths crossing it (0: none)
    queue_pkts: int | None  # None: no rate, no queue of ours


@dataclass(frozen=True)
class Route:
    node: str
    dst_ip: str
    via_ip: str
    ifname: str
    table: int = 0  # 0: main
    src_ip: str | None = None  # set for per-source tables: the rule's `from`


@dataclass(frozen=True)
class Launch:
    instance: str
    at_us: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None


@dataclass(frozen=True)
class ReferencePlan:
    tag: str
    wire_overhead: bool
    nodes: dict[str, Node]
    congestion_control: str | None  # set in every instance's namespace; None: the host's default
    veths: tuple[tuple[str, str, str], ...]  # (ifname, node a, node b)
    hops: tuple[Hop, ...]
    routes: tuple[Route, ...]
    launches: tuple[Launch, ...]

    def ip(self, name: str) -> str:
        return self.nodes[name].ip

    def netns(self, name: str) -> str:
        return self.nodes[name].netns

    def hosts_text(self) -> str:
        """/etc/hosts for every namespace: nodes by name, as Collapsar names instances."""
        lines = ["127.0.0.1\tlocalhost"] + [f"{n.ip}\t{n.name}" for n in self.nodes.values()]
        return "\n".join(lines) + "\n"


def wire_frame_bytes(wire_overhead: bool) -> int:
    return FRAME_BYTES + (WIRE_EXTRA_BYTES if wire_overhead else 0)


def queue_pkts(rate_bps: int, rtt_us: int, wire_overhead: bool) -> int:
    """The BDP rule (module docstring): RTT_L of full frames at the rate, at least MIN_QUEUE_PKTS."""
    return max(MIN_QUEUE_PKTS, math.ceil(rate_bps * rtt_us / (8e6 * wire_frame_bytes(wire_overhead))))


def delay_line_pkts(rate_bps: int, delay_us: int) -> int:
    """Full frames in flight along `delay_us` at `rate_bps` (Little's law)."""
    return math.ceil(rate_bps * delay_us / (8e6 * FRAME_BYTES))


def check_supported(experiment: Experiment) -> None:
    """Raise CollapsarError (file:line) for what the reference cannot build."""
    src = experiment.source
    for event in experiment.events:
        if not (isinstance(event, ServiceEvent) and event.action == "join"):
            kind = type(event).__name__.removesuffix("Event").lower()
            action = getattr(event, "action", "set")
            raise CollapsarError(
                f"{event.where or src}: {kind} {action} event: the reference network plays service joins only"
            )
    for service in experiment.services:
        where = service.where or src
        if service.image:
            raise CollapsarError(f"{where}: service {service.name}: the reference network runs commands, not images")
        for name in ("cpus", "cpuset", "cpu_speed", "memory_bytes"):
            if getattr(service, name) is not None:
                raise CollapsarError(f"{where}: service {service.name}: {name}: not enforced by the reference network")
    for spec in experiment.links:
        for direction, props in (("up", spec.up), ("down", spec.down)):
            if props is not None:
                _check_props(f"{spec.where or src}: link {spec.a} -> {spec.b}: {direction}", props, experiment)


def _check_props(label: str, props: LinkProps, experiment: Experiment) -> None:
    extras = props.extras
    unsupported = [
        name
        for name, value in (
            ("burst loss", extras.loss_model),
            ("reorder", extras.reorder_ratio),
            ("duplicate", extras.duplicate_ratio),
            ("corrupt", extras.corrupt_ratio),
        )
        if value
    ]
    in_order = experiment.settings.in_order if extras.in_order is None else extras.in_order
    if in_order and props.jitter_us:
        unsupported.append("jitter in order")
    if unsupported:
        raise CollapsarError(f"{label}: {', '.join(unsupported)}: not modelled by the reference network yet")


def with_joiners(experiment: Experiment) -> Experiment:
    """The experiment with every joining instance present from t=0 and no events.

    Instances are never transit, so paths between two instances do not depend
    on which others are present: this experiment's t=0 paths are every path
    the run ever routes.  Joins take the next free index, so the names agree."""
    joined: dict[str, int] = defaultdict(int)
    for event in experiment.events:
        if isinstance(event, ServiceEvent):
            joined[event.service] += len(event.targets)
    services = tuple(replace(s, replicas=s.replicas + joined[s.name]) for s in experiment.services)
    return replace(experiment, services=services, events=())


def plan_reference(experiment: Experiment, tag: str, subnet: str = DEFAULT_SUBNET) -> ReferencePlan:
    """The whole reference network for `experiment`; namespaces named with `tag`."""
    from collapsar.collapse import collapse  # numpy and scipy: see the module docstring
    from collapsar.graph import RunGraph

    check_supported(experiment)
    graph = RunGraph(experiment)
    state = collapse(with_joiners(experiment))
    # Link ids as the experiment's own run numbers them (joiners' links last).
    own_id = {(link.spec, link.src, link.dst): link.id for link in graph.links}
    to_own = {link.id: own_id.get((link.spec, link.src, link.dst), -1) for link in state.graph.links}
    if set(state.graph.instances) != set(graph.instances) or -1 in to_own.values():
        raise CollapsarError(f"{experiment.source}: joining instances are not named as the reference expects")
    paths = [replace(p, link_ids=tuple(to_own[i] for i in p.link_ids)) for p in state.paths()]
    props_of = {to_own[link.id]: state.links[link.id].props for link in state.graph.links}
    names = list(graph.bridges) + list(graph.instances)
    nodes = _nodes(names, set(graph.bridges), tag, subnet)
    pair_of = _pairs(graph.links)
    delay = {(p.src, p.dst): p.delay_us for p in paths}
    rtt: dict[int, int] = defaultdict(int)
    for p in paths:
        round_trip = p.delay_us + delay.get((p.dst, p.src), p.delay_us)
        for link_id in p.link_ids:
            rtt[link_id] = max(rtt[link_id], round_trip)
    overhead = experiment.settings.wire_overhead
    hops = tuple(
        Hop(link.id, link.src, link.dst, pair_of[link.id], props, rtt[link.id], _queue(props, rtt[link.id], overhead))
        for link in graph.links
        for props in (props_of[link.id],)
    )
    veths = {(pair_of[link.id], *sorted((link.src, link.dst))) for link in graph.links}
    return ReferencePlan(
        tag=tag,
        wire_overhead=overhead,
        nodes=nodes,
        congestion_control=experiment.settings.congestion_control,
        veths=tuple(sorted(veths, key=lambda v: int(v[0][1:]))),
        hops=hops,
        routes=plan_routes(paths, {h.link_id: h for h in hops}, nodes),
        launches=_launches(experiment, graph),
    )


def _nodes(names: list[str], bridges: set[str], tag: str, subnet: str) -> dict[str, Node]:
    network = ipaddress.IPv4Network(subnet)
    if len(names) > network.num_addresses - 3:
        raise CollapsarError(f"subnet {subnet}: no room for {len(names)} nodes")
    return {
        name: Node(name, "bridge" if name in bridges else "instance", netns_name(tag, name), str(network[0] + 2 + i))
        for i, name in enumerate(names)
    }


def netns_name(tag: str, node: str) -> str:
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in node)
    return f"{PREFIX}-{tag}-{safe}"[:200]


def _pairs(links) -> dict[int, str]:
    """Link id -> veth name: an up link and its down link share one pair."""
    number: dict[tuple[int, str, str], int] = {}
    names = {}
    for link in links:
        key = (link.spec, *sorted((link.src, link.dst)))
        number.setdefault(key, len(number))
        names[link.id] = f"l{number[key]}"
    return names


def _queue(props: LinkProps, rtt_us: int, wire_overhead: bool) -> int | None:
    if props.rate_bps is None:
        return None
    if props.extras.queue is not None:
        return props.extras.queue.packets_at(props.rate_bps, FRAME_BYTES)
    return queue_pkts(props.rate_bps, rtt_us, wire_overhead)


def plan_routes(paths, hop_of: dict[int, Hop], nodes: dict[str, Node]) -> tuple[Route, ...]:
    """Main-table routes where every source agrees on a node's next hop, per-source tables elsewhere."""
    choices: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for p in paths:
        for link_id in p.link_ids:
            hop = hop_of[link_id]
            choices[(hop.src, p.dst)][(nodes[hop.dst].ip, hop.ifname)].append(p.src)
    sources = sorted({p.src for p in paths})
    table_of = {name: POLICY_TABLE_BASE + i for i, name in enumerate(sources)}
    routes = []
    for (node, dst), options in choices.items():
        dst_ip = nodes[dst].ip
        if len(options) == 1:
            (via, ifname), _ = next(iter(options.items()))
            routes.append(Route(node, dst_ip, via, ifname))
            continue
        for (via, ifname), srcs in options.items():
            routes += [Route(node, dst_ip, via, ifname, table_of[s], nodes[s].ip) for s in srcs]
    return tuple(routes)


def _launches(experiment: Experiment, graph) -> tuple[Launch, ...]:
    """Each instance's command: t=0 replicas at 0, joiners at their event's time."""
    at_us: dict[str, int] = dict.fromkeys(graph.initial_instances, 0)
    for event in experiment.events:
        if isinstance(event, ServiceEvent) and event.action == "join":
            for target in event.targets:
                at_us.setdefault(target, event.at_us)
    launches = []
    for name, service in zip(graph.instances, graph.service_of):
        spec = experiment.service(service)
        if spec.command and name in at_us:
            env = tuple(sorted(spec.env.items()))
            launches.append(Launch(name, at_us[name], tuple(spec.command), env, spec.workdir))
    return tuple(sorted(launches, key=lambda launch: launch.at_us))


_tags = itertools.count(1)


def run_tag() -> str:
    """A tag that keeps concurrent reference networks apart: this process and a counter."""
    return f"{os.getpid() % 100000}x{next(_tags)}"
