"""One emulation core per instance: that instance's egress shaping.

A core owns the TCAL tree on the instance's interface (inside its network
namespace; the eBPF counters are read separately, in throughput.py).  It
installs the collapsed paths at t=0 and turns every later path change into
the smallest TCAL call:
`change`/`change_many` for property changes (in place, never delete+add),
`cut`/`restore` when a path disappears or comes back, `add` for a destination
first seen after t=0.  The TCAL classes are passed in, so unit tests can run
a core against a fake tree.
"""

from __future__ import annotations

from typing import Callable

from ..model import Path

SHAPED_FIELDS = ("rate_bps", "delay_us", "jitter_us", "distribution", "loss_ratio")


def needs_netem(paths) -> bool:
    """netem is needed only for delay, jitter or loss; htb alone does rates."""
    return any(p is not None and (p.delay_us or p.jitter_us or p.loss_ratio) for p in paths)


def shaping_fields(path: Path) -> dict[str, object]:
    return {name: getattr(path, name) for name in SHAPED_FIELDS}


class EmulationCore:
    def __init__(self, instance: str, ifname: str, netns: str, ip_of: dict[str, str],
                 tree_factory: Callable[..., object], shaping_type: type,
                 netem: bool, wire_overhead: bool):
        self.instance = instance
        self.ip_of = ip_of
        self._shaping_type = shaping_type
        self.tree = tree_factory(ifname, netns=netns, wire_overhead=wire_overhead, netem=netem)
        # dst instance -> the properties its class carries (None: a placeholder
        # class made only to be cut); `cut` holds destinations now dropped.
        self.shaped: dict[str, Path | None] = {}
        self.cut: set[str] = set()

    def _shaping(self, dst: str, path: Path):
        return self._shaping_type(self.ip_of[dst], path.rate_bps, path.delay_us, path.jitter_us,
                                  path.distribution, path.loss_ratio)

    def install(self, paths: dict[str, Path | None]) -> None:
        """t=0: one class per destination.  An unreachable destination gets a
        cut class too: without one its packets would fall into the unshaped
        default class instead of being dropped."""
        others = {d: p for d, p in paths.items() if d != self.instance}
        # One setup for all (the TCAL batches it); placeholders are cut after.
        self.tree.setup([self._shaping(dst, path) if path is not None
                         else self._shaping_type(self.ip_of[dst], None) for dst, path in others.items()])
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
                # Restore before changing: correct whether the TCAL's restore
                # brings back the pre-cut values or keeps later changes.
                self.tree.restore(ip)
                self.cut.discard(dst)
            old = self.shaped[dst]
            diff = {k: v for k, v in shaping_fields(new).items()
                    if old is None or getattr(old, k) != v}
            if diff:
                batch[ip] = diff
            self.shaped[dst] = new
        if batch:
            self.tree.change_many(batch)

    def configured(self) -> dict[str, Path | None]:
        """dst instance -> the path in force (None: cut)."""
        return {d: (None if d in self.cut else p) for d, p in self.shaped.items()}

    def teardown(self) -> None:
        self.tree.teardown()
