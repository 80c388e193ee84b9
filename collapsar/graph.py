"""The instance-level graph of a whole run: its nodes and its numbered links.

An `Experiment` names elements (services, bridges) and links between them;
the emulation needs instances and unidirectional links with integer ids that
every host computes alike.  `RunGraph` fixes both for the whole run, before
any state is computed:

- nodes: the bridges in file order, then every instance that ever exists:
  the t=0 replicas in service order, then instances that first appear through
  a `join` event, in event order;
- links: every `LinkSpec` (the file's, then those created by `LinkEvent`
  joins, in event order) is instantiated once per instance of a service end
  (once per pair of instances when both ends are services).  Each instance
  link gets an `up` id (a -> b) and, unless one-way, a `down` id (b -> a).
  Ids are handed out in the order things first exist: t=0 links in file
  order then instance order, up before down; then, event by event, the links
  of a newly created spec and the links of a newly seen instance.  An id never
  changes meaning during the run, so hosts can exchange ids instead of names.

What is present or active at a given time is not known here: that is the
timeline's business (`collapsar.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapsar.errors import Problem, TopologyError
from collapsar.model import Experiment, LinkEvent, LinkSpec, ServiceEvent, instance_name


@dataclass(frozen=True)
class DirectedLink:
    """One unidirectional instance-level link."""

    id: int
    spec: int  # index into RunGraph.specs
    direction: str  # "up" (spec.a -> spec.b) or "down"
    src: str  # node name: a bridge or an instance
    dst: str


class RunGraph:
    """Nodes and link ids of one experiment, stable for the whole run."""

    def __init__(self, experiment: Experiment):
        self.experiment = experiment
        self.bridges: tuple[str, ...] = tuple(b.name for b in experiment.bridges)
        self._services = {s.name for s in experiment.services}
        self._bridge_set = set(self.bridges)
        instances: list[str] = []
        service_of: list[str] = []
        for service in experiment.services:
            for index in range(1, service.replicas + 1):
                instances.append(instance_name(service.name, index))
                service_of.append(service.name)
        self.initial_instances = frozenset(instances)
        self.specs: list[LinkSpec] = list(experiment.links)
        self.initial_spec_count = len(self.specs)
        self.spec_of_event: dict[int, int] = {}  # id(LinkEvent with spec) -> spec index
        self.links: list[DirectedLink] = []
        self._paired: set[tuple[int, str, str]] = set()
        self._instances_of: dict[str, list[str]] = {}
        for name, owner in zip(instances, service_of):
            self._instances_of.setdefault(owner, []).append(name)
        for index in range(len(self.specs)):
            self._check_spec(self.specs[index])
            self._instantiate(index)
        for event in experiment.events:
            if isinstance(event, ServiceEvent) and event.action == "join":
                for target in event.targets:
                    if target not in self._known(event.service):
                        instances.append(target)
                        service_of.append(event.service)
                        self._instances_of.setdefault(event.service, []).append(target)
                        self._instantiate_instance(event.service, target)
            elif isinstance(event, LinkEvent) and event.action == "join" and event.spec:
                self._check_spec(event.spec)
                self.specs.append(event.spec)
                self.spec_of_event[id(event)] = len(self.specs) - 1
                self._instantiate(len(self.specs) - 1)
        self.instances: tuple[str, ...] = tuple(instances)
        self.service_of: tuple[str, ...] = tuple(service_of)
        self._index_arrays()

    # ---- id allocation ------------------------------------------------------

    def _known(self, element: str) -> list[str]:
        """Nodes an element stands for so far: itself (bridge) or its instances."""
        if element in self._services:
            return self._instances_of.get(element, [])
        return [element]

    def _check_spec(self, spec: LinkSpec) -> None:
        for end in (spec.a, spec.b):
            if end not in self._services and end not in self._bridge_set:
                raise TopologyError(
                    [Problem(spec.where, f"link {spec.a} -> {spec.b}: {end!r} is neither a service nor a bridge")]
                )
        if spec.a == spec.b:
            raise TopologyError([Problem(spec.where, f"link {spec.a} -> {spec.b}: a link needs two different ends")])

    def _instantiate(self, spec_index: int) -> None:
        spec = self.specs[spec_index]
        for a in self._known(spec.a):
            for b in self._known(spec.b):
                self._add_pair(spec_index, a, b)

    def _instantiate_instance(self, service: str, instance: str) -> None:
        for index, spec in enumerate(self.specs):
            if spec.a == service:
                for b in self._known(spec.b):
                    self._add_pair(index, instance, b)
            elif spec.b == service:
                for a in self._known(spec.a):
                    self._add_pair(index, a, instance)

    def _add_pair(self, spec_index: int, a: str, b: str) -> None:
        if (spec_index, a, b) in self._paired:
            return
        self._paired.add((spec_index, a, b))
        self.links.append(DirectedLink(len(self.links), spec_index, "up", a, b))
        if self.specs[spec_index].down is not None:
            self.links.append(DirectedLink(len(self.links), spec_index, "down", b, a))

    # ---- numeric view -------------------------------------------------------

    def _index_arrays(self) -> None:
        """Node numbering for the routing code: bridges 0..B-1, instances B..B+I-1."""
        names = list(self.bridges) + list(self.instances)
        if len(set(names)) != len(names):
            seen: set[str] = set()
            for clash in names:  # the first name met a second time
                if clash in seen:
                    break
                seen.add(clash)
            raise TopologyError(
                [Problem(None, f"node name {clash!r} is used twice (a bridge and an instance, or two instances)")]
            )
        self.node_index = {name: i for i, name in enumerate(names)}
        self.instance_index = {name: i for i, name in enumerate(self.instances)}
        count = len(self.links)
        self.link_src = np.fromiter((self.node_index[link.src] for link in self.links), np.int64, count)
        self.link_dst = np.fromiter((self.node_index[link.dst] for link in self.links), np.int64, count)
        self.link_spec = np.fromiter((link.spec for link in self.links), np.int64, count)
        self.links_of_spec: list[list[DirectedLink]] = [[] for _ in self.specs]
        for link in self.links:
            self.links_of_spec[link.spec].append(link)
        self.service_names = tuple(s.name for s in self.experiment.services)
        position = {name: i for i, name in enumerate(self.service_names)}
        self.instance_service_index = np.fromiter((position[s] for s in self.service_of), np.int64, len(self.instances))

    @property
    def bridge_count(self) -> int:
        return len(self.bridges)

    @property
    def instance_count(self) -> int:
        return len(self.instances)
