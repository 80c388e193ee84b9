"""One emulation core per instance: that instance's egress shaping.

A core owns the TCAL tree on the instance's interface (inside its network
namespace; the eBPF counters are read separately, in measure/throughput.py).  It
installs the collapsed paths at t=0 and turns every later path change into
the smallest TCAL call:
`change`/`change_many` for property changes (in place, never delete+add),
`cut`/`restore` when a path disappears or comes back, `add` for a destination
first seen after t=0.  The TCAL classes are passed in, so unit tests can run
a core against a fake tree.

The sharing loop (sharing/loop.py) narrows a destination with an `Override`
(its allowed share, its congestion loss) on top of the configured path; the
core keeps both, so a timeline change of the path and a new share compose,
and what the tree holds is always `effective(path, override)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collapsar.model import Path

SHAPED_FIELDS = ("rate_bps", "delay_us", "jitter_us", "distribution", "loss_ratio")


def needs_netem(paths) -> bool:
    """netem is needed only for delay, jitter or loss; htb alone does rates."""
    return any(p is not None and (p.delay_us or p.jitter_us or p.loss_ratio) for p in paths)


def shaping_fields(path: Path) -> dict[str, object]:
    return {name: getattr(path, name) for name in SHAPED_FIELDS}


@dataclass(frozen=True)
class Override:
    """What bandwidth sharing imposes on one destination, over its path."""

    rate_bps: int | None = None  # the allowed share; None: the path's own rate
    loss_ratio: float = 0.0  # congestion loss, compounded with the path's loss


def effective_fields(path: Path, override: Override | None, netem: bool) -> dict[str, object]:
    fields = shaping_fields(path)
    if override is None:
        return fields
    if override.rate_bps is not None:
        fields["rate_bps"] = override.rate_bps if path.rate_bps is None else min(path.rate_bps, override.rate_bps)
    if override.loss_ratio and netem:  # without netem there is no loss to set
        fields["loss_ratio"] = 1.0 - (1.0 - path.loss_ratio) * (1.0 - override.loss_ratio)
    return fields


class EmulationCore:
    def __init__(
        self,
        instance: str,
        ifname: str,
        netns: str,
        ip_of: dict[str, str],
        tree_factory: Callable[..., object],
        shaping_type: type,
        netem: bool,
        wire_overhead: bool,
    ):
        self.instance = instance
        self.ip_of = ip_of
        self.netem = netem
        self._shaping_type = shaping_type
        self.tree = tree_factory(ifname, netns=netns, wire_overhead=wire_overhead, netem=netem)
        # dst instance -> the properties its class carries (None: a placeholder
        # class made only to be cut); `cut` holds destinations now dropped.
        self.shaped: dict[str, Path | None] = {}
        self.cut: set[str] = set()
        self.overrides: dict[str, Override] = {}
        # dst -> the fields its class holds in the tree (absent: placeholder)
        self._in_tree: dict[str, dict[str, object]] = {}

    def _shaping(self, dst: str, path: Path):
        fields = effective_fields(path, self.overrides.get(dst), self.netem)
        self._in_tree[dst] = fields
        return self._shaping_type(self.ip_of[dst], **fields)

    def _diff(self, dst: str, path: Path) -> dict[str, object]:
        """The fields to change so that dst's class holds the effective values."""
        new = effective_fields(path, self.overrides.get(dst), self.netem)
        old = self._in_tree.get(dst)
        self._in_tree[dst] = new
        return {k: v for k, v in new.items() if old is None or old[k] != v}

    def install(self, paths: dict[str, Path | None]) -> None:
        """t=0: one class per destination.  An unreachable destination gets a
        cut class too: without one its packets would fall into the unshaped
        default class instead of being dropped."""
        others = {d: p for d, p in paths.items() if d != self.instance}
        # One setup for all (the TCAL batches it); placeholders are cut after.
        self.tree.setup(
            [
                self._shaping(dst, path) if path is not None else self._shaping_type(self.ip_of[dst], None)
                for dst, path in others.items()
            ]
        )
        self.shaped = dict(others)
        for dst, path in others.items():
            if path is None:
                self.tree.cut(self.ip_of[dst])
                self.cut.add(dst)

    def _add_cut(self, dst: str) -> None:
        self.tree.add(self._shaping_type(self.ip_of[dst], None))
        self.tree.cut(self.ip_of[dst])
        self.shaped[dst] = None
        self.cut.add(dst)

    def apply(self, changes: dict[str, Path | None]) -> None:
        """New paths for some destinations (None: unreachable or cut)."""
        batch: dict[str, dict[str, object]] = {}
        restore: list[str] = []
        for dst, new in changes.items():
            if dst == self.instance:
                continue
            ip = self.ip_of[dst]
            if new is None:
                if dst not in self.shaped:
                    self._add_cut(dst)
                elif dst not in self.cut:
                    self.tree.cut(ip)
                    self.cut.add(dst)
                continue
            if dst not in self.shaped:
                self.tree.add(self._shaping(dst, new))
                self.shaped[dst] = new
                continue
            if dst in self.cut:
                restore.append(ip)
                self.cut.discard(dst)
            diff = self._diff(dst, new)
            if diff:
                batch[ip] = diff
            self.shaped[dst] = new
        # A cut class takes its new values first and only then gets its
        # packets back (the TCAL's restore re-points the filter, nothing
        # else): no packet passes with the values from before the cut.
        if batch:
            self.tree.change_many(batch)
        for ip in restore:
            self.tree.restore(ip)

    def set_overrides(self, changes: dict[str, Override | None]) -> None:
        """New shares for some destinations (None: back to the path alone),
        one batched change.  A cut destination keeps its override for when
        it is restored."""
        batch: dict[str, dict[str, object]] = {}
        for dst, override in changes.items():
            if override is None or override == Override():
                self.overrides.pop(dst, None)
            else:
                self.overrides[dst] = override
            path = self.shaped.get(dst)
            if path is None or dst in self.cut:
                continue
            diff = self._diff(dst, path)
            if diff:
                batch[self.ip_of[dst]] = diff
        if batch:
            self.tree.change_many(batch)

    def effective(self, dst: str) -> dict[str, object] | None:
        """The fields dst's class holds now (None: cut or a placeholder)."""
        if dst in self.cut or self.shaped.get(dst) is None:
            return None
        return dict(self._in_tree[dst])

    def configured(self) -> dict[str, Path | None]:
        """dst instance -> the path in force (None: cut)."""
        return {d: (None if d in self.cut else p) for d, p in self.shaped.items()}

    def teardown(self) -> None:
        self.tree.teardown()


class RealTcal:
    """The TCAL entry points a run uses (local and container mode alike),
    imported only when a run starts: unit tests pass fakes instead."""

    def __init__(self):
        from collapsar.tcal import Shaping, TcTree, check_kernel

        self.Shaping, self.TcTree, self.check_kernel = Shaping, TcTree, check_kernel

    @staticmethod
    def counters_factory(ifname: str, netns: str):
        from collapsar.tcal.counters import Counters

        return Counters(ifname, netns=netns)


def real_tcal() -> RealTcal:
    return RealTcal()
