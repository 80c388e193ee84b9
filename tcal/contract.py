"""What a tc tree promises its user: the `ShapingTree` protocol, the typed
`ShapingChange` it takes, and the `TreeFactory` that makes one.

The emulation core (collapsar.manager.core) is written against this
contract; `collapsar.tcal.TcTree` keeps it on the kernel, and the tests'
`FakeTree` (tests/fake_tc.py) keeps it in memory.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from collapsar.egress import EgressBucket
from collapsar.errors import CollapsarError
from collapsar.model import SHAPING_FIELDS, LinkProps
from collapsar.tcal.bucket import TbfParams
from collapsar.tcal.plan import Shaping
from collapsar.trafficclasses import TrafficClasses

ALL_FIELDS = frozenset(SHAPING_FIELDS)
RATE_ONLY = frozenset({"rate_bps"})


@dataclass(frozen=True)
class ShapingChange:
    """New values for some of one destination's shaping fields: `fields`
    names them and `record` carries them (its other fields are not part of
    the change).  A change from the core sets the fields that differ from
    what the class holds, or all of them when it does not know what the
    class holds (one made as a placeholder)."""

    record: LinkProps
    fields: frozenset[str]

    def __post_init__(self) -> None:
        _known(self.fields)

    @classmethod
    def of(cls, **values: Any) -> ShapingChange:
        """A change by field name: `ShapingChange.of(rate_bps=10**6)`."""
        fields = _known(frozenset(values))
        return cls(LinkProps(**values), fields)

    @classmethod
    def between(cls, old: LinkProps | None, new: LinkProps) -> ShapingChange:
        """From `old` (None: not known) to `new`; no fields when they are equal."""
        if old is None:
            return cls(new, ALL_FIELDS)
        return cls(new, frozenset(name for name in SHAPING_FIELDS if getattr(old, name) != getattr(new, name)))

    @property
    def rate_only(self) -> bool:
        """Only the rate changes: the sharing loop's change, hundreds per period."""
        return self.fields == RATE_ONLY

    def values(self) -> dict[str, Any]:
        """The fields this change sets and their new values, in record order."""
        return {name: getattr(self.record, name) for name in SHAPING_FIELDS if name in self.fields}


def _known(fields: frozenset[str]) -> frozenset[str]:
    if not fields <= ALL_FIELDS:
        raise CollapsarError(f"cannot change {sorted(fields - ALL_FIELDS)}; expected some of {sorted(ALL_FIELDS)}")
    return fields


class ShapingTree(Protocol):
    """One interface's tree: a class per destination address (or, in
    collapsar.tcal.active, one shared by destinations without traffic),
    changed in place.

    Every call but `setup` and `teardown` names a destination the tree holds
    (`add` one it does not); a bad value or a refusal of the kernel is a
    `CollapsarError` and leaves that destination as it was."""

    @property
    def shapings(self) -> Mapping[str, Shaping]:
        """Destination address -> the record its class holds now."""
        ...

    def setup(self, shapings: Sequence[Shaping], groups: Mapping[str, Hashable] | None = None) -> None:
        """Make the tree with one class per destination.  `groups`
        (destination address -> key): destinations whose paths change alike
        for the whole run share a key, so a tree that shares classes keeps
        them together and changes their class in place (a hint: any
        grouping gives the same shaping)."""
        ...

    def add(self, shaping: Shaping) -> None:
        """A class for a destination first seen after setup."""
        ...

    def change_many(self, changes: Mapping[str, ShapingChange]) -> None:
        """Change classes in place, in one batch (destination address -> change)."""
        ...

    def change_groups(self, groups: Sequence[tuple[Sequence[str], ShapingChange]]) -> None:
        """change_many with each change given once for its destinations (a
        link change: hundreds of destinations, one change): the same effect,
        without a per-destination mapping to build and read."""
        ...

    def activate(self, dst_ips: Iterable[str]) -> int:
        """The destinations now carry traffic: each gets a class of its own if
        it shares one (collapsar.tcal.active); returns how many did."""
        ...

    def cut(self, dst_ip: str) -> None:
        """Drop the destination's packets; its class keeps its values."""
        ...

    def restore(self, dst_ip: str) -> None:
        """Send the destination's packets through its class again."""
        ...

    def cut_all(self) -> None:
        """Drop every destination's packets at once; each destination keeps
        its class and its own cut or not, in force again after restore_all."""
        ...

    def restore_all(self) -> None:
        """Undo cut_all."""
        ...

    def remove(self, dst_ip: str) -> None:
        """Delete the destination's class; its packets are dropped from then on."""
        ...

    def bucket_sent_bytes(self) -> int | None:
        """What the egress token bucket has let through (frame bytes); None without one."""
        ...

    @property
    def bucket_params(self) -> TbfParams | None:
        """The egress token bucket's numbers as the kernel holds them (for
        the interface's MTU), once `setup` made it; None without one."""
        ...

    def teardown(self) -> None:
        """Remove everything the tree made; a second call does nothing."""
        ...


class TreeFactory(Protocol):
    """How the emulation core gets its tree (TcTree's constructor, or a fake's)."""

    def __call__(
        self,
        ifname: str,
        *,
        netns: str | None,
        wire_overhead: bool,
        netem: bool,
        bucket: EgressBucket | None = None,
        classes: TrafficClasses | None = None,
    ) -> ShapingTree: ...


class InstanceGuards(Protocol):
    """Each instance's guard: every path to it cut at once
    (collapsar.tcal.guard keeps it on the kernel)."""

    on: set[str]  # instances guarded now

    def set(self, on: Iterable[str] = (), off: Iterable[str] = ()) -> None:
        """Guard `on`, unguard `off`, in one batch."""
        ...

    def close(self) -> None:
        """Remove every guard; a second call does nothing."""
        ...
