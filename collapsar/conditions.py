"""What holds at one moment of a run: presence, link properties, cuts.

`Conditions` starts as the experiment at t=0 and changes by `apply(event)`.
It only records facts (which bridges, instances and specs are present, each
link's current properties, which instances are disconnected, which partitions
are active); turning them into paths is `collapsar.routing`'s job.  Properties
are kept per link id in numpy arrays so that the routing code can read them
without a Python loop.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from collapsar.errors import Problem, TopologyError
from collapsar.graph import RunGraph
from collapsar.impairments import EXTRA_FIELDS, NO_EXTRAS, Extras
from collapsar.model import (
    DISTRIBUTIONS,
    SHAPING_FIELDS,
    BridgeEvent,
    Event,
    LinkEvent,
    LinkProps,
    LinkSetEvent,
    PartitionEvent,
    ServiceEvent,
)

NO_RATE = np.iinfo(np.int64).max  # "not limited": the neutral element of min()


class Conditions:
    """Presence and link properties at one moment (mutable; `copy()` to keep)."""

    def __init__(self, graph: RunGraph):
        self.graph = graph
        self.spec_on = np.zeros(len(graph.specs), bool)
        self.spec_on[: graph.initial_spec_count] = True
        self.bridge_on = np.ones(graph.bridge_count, bool)
        self.instance_on = np.fromiter(
            (name in graph.initial_instances for name in graph.instances), bool, graph.instance_count
        )
        self.disconnected = np.zeros(graph.instance_count, bool)
        self.partitions: list[tuple[frozenset[str], ...]] = []
        # A key names the latest spec between two elements: a `join` with new
        # properties replaces the older link for later `set` and `leave` events.
        initial = graph.specs[: graph.initial_spec_count]
        self._latest = {spec.key: i for i, spec in enumerate(initial)}
        count = len(graph.links)
        self.delay_us = np.zeros(count, np.int64)
        self.jitter_us = np.zeros(count, np.int64)
        self.loss_ratio = np.zeros(count, np.float64)
        self.rate_bps = np.full(count, NO_RATE, np.int64)
        self.dist_code = np.zeros(count, np.int8)
        # Burst loss, reordering, ... (collapsar.impairments): the records, and
        # a number naming each (0: none) that paths fold as a sum.
        self.extras: list[Extras] = [NO_EXTRAS] * count
        self.extra_sig = np.zeros(count, np.uint64)
        for link in graph.links:
            spec = graph.specs[link.spec]
            props = spec.up if link.direction == "up" else spec.down
            assert props is not None  # a "down" link is made only for a spec with a down direction
            self._set(link.id, props)

    def copy(self) -> Conditions:
        clone = copy.copy(self)
        for name in (
            "spec_on",
            "bridge_on",
            "instance_on",
            "disconnected",
            "delay_us",
            "jitter_us",
            "loss_ratio",
            "rate_bps",
            "dist_code",
            "extra_sig",
        ):
            setattr(clone, name, getattr(self, name).copy())
        clone.extras = list(self.extras)
        clone.partitions = list(self.partitions)
        clone._latest = dict(self._latest)  # noqa: SLF001 - the clone is this class's own
        return clone

    # ---- reading --------------------------------------------------------------

    def node_on(self) -> np.ndarray:
        return np.concatenate([self.bridge_on, self.instance_on])

    def link_active(self) -> np.ndarray:
        """Per link id: its spec is present and both its ends are present."""
        node_on = self.node_on()
        graph = self.graph
        return self.spec_on[graph.link_spec] & node_on[graph.link_src] & node_on[graph.link_dst]

    def props(self, link_id: int) -> LinkProps:
        rate = int(self.rate_bps[link_id])
        return LinkProps(
            delay_us=int(self.delay_us[link_id]),
            jitter_us=int(self.jitter_us[link_id]),
            distribution=DISTRIBUTIONS[self.dist_code[link_id]],
            loss_ratio=float(self.loss_ratio[link_id]),
            rate_bps=None if rate == NO_RATE else rate,
            extras=self.extras[link_id],
        )

    def partition_group(self) -> list[np.ndarray]:
        """Per active partition: each instance's group number, -1 if in none."""
        result = []
        names = self.graph.service_names
        for groups in self.partitions:
            by_service = np.full(len(names), -1, np.int64)
            for number, group in enumerate(groups):
                for service in group:
                    by_service[names.index(service)] = number
            result.append(by_service[self.graph.instance_service_index])
        return result

    # ---- changing -------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if isinstance(event, ServiceEvent):
            self._service(event)
        elif isinstance(event, BridgeEvent):
            self.bridge_on[self.graph.bridges.index(event.bridge)] = event.action == "join"
        elif isinstance(event, LinkEvent):
            self._link(event)
        elif isinstance(event, LinkSetEvent):
            self._link_set(event)
        elif isinstance(event, PartitionEvent):
            self._partition(event)
        else:
            raise TypeError(f"not an event: {event!r}")

    def _service(self, event: ServiceEvent) -> None:
        index = [self.graph.instance_index[t] for t in event.targets]
        if event.action == "join":
            self.instance_on[index] = True
            self.disconnected[index] = False
        elif event.action in ("leave", "crash"):
            # A crashed instance is gone for the network just like one that left.
            self.instance_on[index] = False
            self.disconnected[index] = False
        else:
            self.disconnected[index] = event.action == "disconnect"

    def _spec_for(self, event: LinkEvent | LinkSetEvent) -> int:
        key = frozenset((event.a, event.b))
        if key not in self._latest:
            raise TopologyError([Problem(event.where, f"link {event.a} -> {event.b}: no such link at this time")])
        return self._latest[key]

    def _link(self, event: LinkEvent) -> None:
        if event.action == "join" and event.spec is not None:
            index = self.graph.spec_of_event[id(event)]
            self._latest[event.spec.key] = index
        else:
            index = self._spec_for(event)
        self.spec_on[index] = event.action == "join"

    def _link_set(self, event: LinkSetEvent) -> None:
        index = self._spec_for(event)
        spec = self.graph.specs[index]
        forward, backward = (event.up, event.down) if event.a == spec.a else (event.down, event.up)
        if backward and spec.down is None:
            raise TopologyError(
                [
                    Problem(
                        event.where, f"link {spec.a} -> {spec.b} is one-way: nothing to set from {spec.b} to {spec.a}"
                    )
                ]
            )
        for link in self.graph.links_of_spec[index]:
            changes = forward if link.direction == "up" else backward
            unknown = sorted(set(changes) - set(SHAPING_FIELDS) - set(EXTRA_FIELDS))
            if unknown:
                raise TopologyError(
                    [
                        Problem(
                            event.where,
                            f"link {event.a} -> {event.b}: cannot set {unknown[0]!r}; expected one of {SHAPING_FIELDS}",
                        )
                    ]
                )
            if changes:
                values: dict[str, Any] = dict(changes)  # names checked here, values by the parser
                self._set(link.id, self.props(link.id).changed(values))

    def _set(self, link_id: int, props: LinkProps) -> None:
        self.delay_us[link_id] = props.delay_us
        self.jitter_us[link_id] = props.jitter_us
        self.loss_ratio[link_id] = props.loss_ratio
        self.rate_bps[link_id] = NO_RATE if props.rate_bps is None else props.rate_bps
        self.dist_code[link_id] = DISTRIBUTIONS.index(props.distribution)
        self.extras[link_id] = props.extras
        self.extra_sig[link_id] = props.extras.signature()

    def _partition(self, event: PartitionEvent) -> None:
        groups = tuple(event.groups)
        if event.action == "start":
            self.partitions.append(groups)
            return
        for i, active in enumerate(self.partitions):
            if set(active) == set(groups):
                del self.partitions[i]
                return
        raise TopologyError(
            [Problem(event.where, "partition heal: no partition of these groups is active at this time")]
        )
