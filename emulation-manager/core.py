"""One emulation core per instance: that instance's egress shaping.

A core owns the TCAL tree on the instance's interface (inside its network
namespace; the eBPF counters are read separately, in measure/throughput.py).  It
installs the collapsed paths at t=0 and turns every later path change into
the smallest TCAL call:
`change_many` for property changes (in place, never delete+add),
`cut`/`restore` when a path disappears or comes back, `add` for a destination
first seen after t=0.  The tree is made by the factory passed in
(collapsar.tcal.contract.TreeFactory), so unit tests run a core against a
fake tree; what t=0 installs is the core's `plan`, which `--dry-run` prints.

The sharing loop (sharing/loop.py) narrows a destination with an `Override`
(its allowed share, its congestion loss) on top of the configured path; the
core keeps both, so a timeline change of the path and a new share compose,
and what the tree holds is always `effective(path, override)`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import cast

from collapsar.egress import EgressBucket
from collapsar.errors import CollapsarError
from collapsar.impairments import with_loss
from collapsar.manager.measure.bucket import BucketGauge
from collapsar.model import LinkProps, Path, shaping_values
from collapsar.tcal.contract import InstanceGuards, ShapingChange, ShapingTree, TreeFactory
from collapsar.tcal.plan import Shaping
from collapsar.trafficclasses import TrafficClasses


def needs_netem(paths: Iterable[Path | None]) -> bool:
    """netem is needed only for delay, jitter or loss; htb alone does rates."""
    return any(p is not None and p.needs_netem for p in paths)


@dataclass(frozen=True)
class Override:
    """What bandwidth sharing imposes on one destination, over its path."""

    rate_bps: int | None = None  # the allowed share; None: the path's own rate
    loss_ratio: float = 0.0  # congestion loss, compounded with the path's loss
    queue_us: int = 0  # the standing queues of the full links it crosses, added to its delay
    drop_ratio: float = 0.0  # those full queues' drops, compounded with the path's loss


def effective(path: Path, override: Override | None, netem: bool) -> LinkProps:
    """What a destination's class holds: its path, narrowed by its override."""
    props = path.props
    if override is None:
        return props
    rate, loss = props.rate_bps, props.loss_ratio
    if override.rate_bps is not None:
        rate = override.rate_bps if rate is None else min(rate, override.rate_bps)
    extras = props.extras
    more = 1.0 - (1.0 - override.loss_ratio) * (1.0 - override.drop_ratio)
    if more and netem:  # without netem there is no loss to set
        loss, extras = with_loss(loss, extras, more)
    delay = props.delay_us + override.queue_us if netem else props.delay_us  # nor delay
    return replace(props, rate_bps=rate, loss_ratio=loss, extras=extras, delay_us=delay)


WHOLE_CUT_FROM = 2  # destinations cut in one step, none left with a path: one cut_all instead

PLACEHOLDER = LinkProps()  # a class made only to be cut: unlimited, no delay


@dataclass(frozen=True)
class InstallPlan:
    """What `install` hands the tree at t=0, destination by destination: the
    record its class is made with, and whether it is cut right after (no path:
    a placeholder class, so that its packets are dropped rather than falling
    into the unshaped default class)."""

    shapings: tuple[Shaping, ...]
    cut: tuple[str, ...]  # destination instances, in the order of `shapings`
    whole_cut: bool = False  # every destination is cut: one cut_all rather than one cut each


class EmulationCore:
    def __init__(
        self,
        instance: str,
        ifname: str,
        netns: str,
        ip_of: Mapping[str, str],
        tree_factory: TreeFactory,
        shaping_type: type[Shaping],
        netem: bool,
        wire_overhead: bool,
        egress: EgressBucket | None = None,
        classes: TrafficClasses | None = None,
    ):
        self.instance = instance
        self.egress = egress  # its token bucket over all it sends (collapsar.egress)
        self.classes = classes  # its traffic classes (collapsar.trafficclasses)
        self.bucket_gauge: BucketGauge | None = None  # the bucket's level, from its first sample
        self.ifname, self.netns = ifname, netns
        self.ip_of = ip_of
        self.netem, self.wire_overhead = netem, wire_overhead
        self._tree_factory = tree_factory
        self._shaping_type = shaping_type
        self._tree: ShapingTree | None = None  # made by install
        # dst instance -> the properties its class carries (None: a placeholder
        # class made only to be cut); `cut` holds destinations now dropped.
        self.shaped: dict[str, Path | None] = {}
        self.cut: set[str] = set()
        self.overrides: dict[str, Override] = {}
        # Cut by the tree's cut_all alone (their own filters still point at
        # their classes): a subset of `cut`, while _all_cut.
        self._held: set[str] = set()
        self._all_cut = False
        # Cut by their own guard (collapsar.tcal.guard: every path to them,
        # at their bridge port), not in this tree: a subset of `cut`, not of
        # `_held`; their filters still point at their classes.
        self._guarded: set[str] = set()
        # dst -> the record its class holds in the tree (absent: placeholder);
        # records without an override are interned (one object per distinct
        # values), so that destinations of one record are known as one.
        self._in_tree: dict[str, LinkProps] = {}
        self._records: dict[tuple, LinkProps] = {}

    @property
    def tree(self) -> ShapingTree:
        if self._tree is None:
            raise CollapsarError(f"instance {self.instance}: its core is not installed")
        return self._tree

    def plan(self, paths: Mapping[str, Path | None], future: Mapping[str, Path] | None = None) -> InstallPlan:
        """What `install(paths, future=future)` puts in the tree; changes nothing."""
        shapings, cut = [], []
        for dst, path in paths.items():
            if dst == self.instance:
                continue
            if path is None:
                cut.append(dst)
                path = None if future is None else future.get(dst)
            props = PLACEHOLDER if path is None else effective(path, self.overrides.get(dst), self.netem)
            shapings.append(self._shaping_type.of(self.ip_of[dst], props))
        return InstallPlan(tuple(shapings), tuple(cut), len(cut) == len(shapings) and len(cut) >= WHOLE_CUT_FROM)

    def install(
        self,
        paths: Mapping[str, Path | None],
        groups: Mapping[str, Hashable] | None = None,
        guarded: Collection[str] = (),
        future: Mapping[str, Path] | None = None,
    ) -> None:
        """t=0: one class per destination, in one setup (the TCAL batches it);
        the placeholders are cut after.  `groups`: dst -> its changes over
        the run (play.player.lineages), the hint ShapingTree.setup takes.
        `guarded`: destinations whose guard is on (their cut is theirs, not
        this tree's); `future`: for destinations without a path now, the
        path they will first have (a class made with it needs no change
        when they come: a join is then one message, its guard's)."""
        plan = self.plan(paths, future)
        self._tree = self._tree_factory(
            self.ifname,
            netns=self.netns,
            wire_overhead=self.wire_overhead,
            netem=self.netem,
            bucket=self.egress,
            classes=self.classes,
        )
        ip_groups = None if groups is None else {self.ip_of[dst]: key for dst, key in groups.items()}
        self._tree.setup(plan.shapings, ip_groups)
        sent, params = self._tree.bucket_sent_bytes(), self._tree.bucket_params
        if self.egress is not None and sent is not None and params is not None:  # full from now on, as made
            self.bucket_gauge = BucketGauge(self.egress, params, time.monotonic(), sent)
        self.shaped = {dst: path for dst, path in paths.items() if dst != self.instance}
        self._in_tree = {dst: self._effective(dst, path) for dst, path in self.shaped.items() if path is not None}
        if future:
            for dst in plan.cut:
                if dst in future:
                    self._in_tree[dst] = self._effective(dst, future[dst])
        self._cut(list(plan.cut), whole=plan.whole_cut, guarded=guarded)

    def _add(self, dst: str, path: Path | None) -> None:
        """A destination first seen after t=0: its class, cut at once if it has no path."""
        props = PLACEHOLDER if path is None else self._effective(dst, path)
        self.tree.add(self._shaping_type.of(self.ip_of[dst], props))
        self.shaped[dst] = path
        if path is None:
            self.tree.cut(self.ip_of[dst])
            self.cut.add(dst)
        else:
            self._in_tree[dst] = props

    def _effective(self, dst: str, path: Path) -> LinkProps:
        override = self.overrides.get(dst)
        return self._record(path) if override is None else effective(path, override, self.netem)

    def _record(self, path: Path) -> LinkProps:
        """The path's record, interned."""
        values = shaping_values(path)
        record = self._records.get(values)
        if record is None:
            record = self._records[values] = path.props
        return record

    def _change(self, dst: str, path: Path) -> ShapingChange:
        """The change that makes dst's class hold its effective values."""
        new = self._effective(dst, path)
        change = ShapingChange.between(self._in_tree.get(dst), new)
        self._in_tree[dst] = new
        return change

    def apply(self, changes: Mapping[str, Path | None], guarded: Collection[str] = ()) -> None:
        """New paths for some destinations (None: unreachable or cut).

        A step that leaves none of the destinations reachable (this
        instance disconnected, crashed or gone: hundreds of paths) cuts the
        whole tree in one message (ShapingTree.cut_all) rather than each
        destination; the first destination to come back turns that into
        per-destination cuts of those still without a path, then lifts it.
        A destination in `guarded` (its guard is on once this step is in
        force) is cut by its guard: nothing changes in this tree, and its
        coming back is its guard lifted (see `unguard`)."""
        restore: list[str] = []
        special = {self.instance} | (changes.keys() - self.shaped.keys())
        special |= changes.keys() & (self.cut | self.overrides.keys())
        special.update(dst for dst, path in changes.items() if path is None)
        groups = self._apply_plain([dst for dst in changes if dst not in special], changes)
        to_cut, to_live = [], []
        for dst in changes:
            if dst not in special or dst == self.instance:
                continue
            if dst not in self.shaped:
                self._add(dst, changes[dst])
            elif changes[dst] is None:
                if dst not in self.cut:
                    to_cut.append(dst)
            else:
                to_live.append(dst)
        live_after = len(self.shaped) - len(self.cut) - len(to_cut) + sum(1 for dst in to_live if dst in self.cut)
        whole = live_after == 0 and (self._all_cut or len(to_cut) >= WHOLE_CUT_FROM)
        self._cut(to_cut, whole, guarded)
        for dst in to_live:
            ip = self.ip_of[dst]
            if dst in self._held or dst in self._guarded:  # its filter still points at its class
                self._held.discard(dst)
                self._guarded.discard(dst)
                self.cut.discard(dst)
            elif dst in self.cut:
                restore.append(ip)
                self.cut.discard(dst)
            change = self._change(dst, changes[dst])  # type: ignore[arg-type]  # to_live: not None
            if change.fields:
                groups.append(([ip], change))
            self.shaped[dst] = changes[dst]
        # A cut class takes its new values first and only then gets its
        # packets back (the TCAL's restore re-points the filter, nothing
        # else): no packet passes with the values from before the cut.
        if groups:
            self.tree.change_groups(groups)
        if self._all_cut and len(self.cut) < len(self.shaped):
            for dst in sorted(self._held):  # still without a path: cut by its own filter from now on
                self.tree.cut(self.ip_of[dst])
            self._held.clear()
            self.tree.restore_all()
            self._all_cut = False
        for ip in restore:
            self.tree.restore(ip)

    def _cut(self, dsts: list[str], whole: bool, guarded: Collection[str] = ()) -> None:
        """Cut these destinations: those `guarded`, by their guards; the
        others, with `whole`, by the tree's cut_all (none is left with a
        path), else one by one."""
        if whole and not self._all_cut:
            self.tree.cut_all()
            self._all_cut = True
        for dst in dsts:
            if dst in guarded:
                self._guarded.add(dst)
            elif whole:
                self._held.add(dst)
            else:
                self.tree.cut(self.ip_of[dst])
            self.cut.add(dst)

    def unguard(self, dst: str) -> None:
        """dst's guard is lifted at this step: if this tree left dst to it
        and the step gave dst no path from here, this tree cuts it now (by
        cut_all while that holds)."""
        if dst not in self._guarded:
            return
        self._guarded.discard(dst)
        if self._all_cut:
            self._held.add(dst)
        else:
            self.tree.cut(self.ip_of[dst])

    def _apply_plain(
        self, dsts: list[str], changes: Mapping[str, Path | None]
    ) -> list[tuple[Sequence[str], ShapingChange]]:
        """New paths for shaped destinations, neither cut nor overridden.

        A link change hands one core hundreds of these, going from one
        record to one other (80,000 at 400 instances for a link every path
        across the middle of the topology shares): they are grouped by
        (record in the tree, new values), each group's change is made once,
        and the tree gets that one object for all of its destinations
        (collapsar.tcal.active changes their shared class in place).  The
        per-destination work is C (map, zip, dict.update).  Returns the
        groups to change: (addresses, change)."""
        if not dsts:
            return []
        paths = cast("list[Path]", list(map(changes.__getitem__, dsts)))  # no None among dsts
        olds = list(map(self._in_tree.__getitem__, dsts))  # held: their ids stay theirs
        keys = list(zip(map(id, olds), map(shaping_values, paths)))
        groups: dict[tuple, tuple[int, list[str]]]  # key -> (index of its first, its destinations)
        if keys.count(keys[0]) == len(keys):
            groups = {keys[0]: (0, dsts)}
        else:
            groups = {}
            for i, (key, dst) in enumerate(zip(keys, dsts)):
                group = groups.get(key)
                if group is None:
                    groups[key] = (i, [dst])
                else:
                    group[1].append(dst)
        out: list[tuple[Sequence[str], ShapingChange]] = []
        for first, members in groups.values():
            record = self._record(paths[first])
            change = ShapingChange.between(olds[first], record)
            self._in_tree.update(dict.fromkeys(members, record))
            if change.fields:
                out.append((list(map(self.ip_of.__getitem__, members)), change))
        self.shaped.update(zip(dsts, paths))
        return out

    def set_overrides(self, changes: Mapping[str, Override | None]) -> None:
        """New shares for some destinations (None: back to the path alone),
        one batched change.  A cut destination keeps its override for when
        it is restored."""
        batch: dict[str, ShapingChange] = {}
        for dst, override in changes.items():
            if override is None or override == Override():
                self.overrides.pop(dst, None)
            else:
                self.overrides[dst] = override
            path = self.shaped.get(dst)
            if path is None or dst in self.cut:
                continue
            change = self._change(dst, path)
            if change.fields:
                batch[self.ip_of[dst]] = change
        if batch:
            self.tree.change_many(batch)

    def activate(self, dsts: Iterable[str]) -> int:
        """These destinations now carry traffic (the meter saw their first
        bytes): a tree whose idle destinations share classes gives each its
        own (collapsar.tcal.active).  Returns how many it made."""
        ips = [self.ip_of[dst] for dst in dsts if dst in self.shaped]
        return self.tree.activate(ips) if ips else 0

    def effective(self, dst: str) -> dict[str, object] | None:
        """The fields dst's class holds now, by name (None: cut or a placeholder)."""
        if dst in self.cut or self.shaped.get(dst) is None:
            return None
        return asdict(self._in_tree[dst])

    def class_rate(self, dst: str) -> int | None:
        """The rate dst's class holds (its path narrowed by its share; None:
        unlimited, cut or a placeholder).  Read without the lock: one dict
        lookup of a record replaced whole."""
        record = None if dst in self.cut else self._in_tree.get(dst)
        return None if record is None else record.rate_bps

    def configured(self) -> dict[str, Path | None]:
        """dst instance -> the path in force (None: cut)."""
        return {d: (None if d in self.cut else p) for d, p in self.shaped.items()}

    def sample_bucket(self) -> None:
        """Follow the egress bucket's level (measure/bucket.py): once a second (run/skeleton.py)."""
        if self.bucket_gauge is None or self.bucket_gauge.stale:
            return
        sent = self.tree.bucket_sent_bytes()
        if sent is not None:
            self.bucket_gauge.sample(sent, time.monotonic())

    def teardown(self) -> None:
        if self._tree is not None:
            self._tree.teardown()


def guard_step(
    guards: InstanceGuards, guarded: set[str], cores: Iterable[EmulationCore], cut_off: list[str], reached: list[str]
) -> Callable[[], None]:
    """A step's guard changes (play.player.set_all_paths), for a run whose
    cores are all here: `guarded` (what the cores' `apply` leaves to the
    guards) takes them now, before the paths; the returned finish, called
    after the paths, has each core cut a reached instance it still has no
    path to, then turns the guards on and off."""
    guarded.update(cut_off)
    guarded.difference_update(reached)

    def finish() -> None:
        for instance in reached:
            for core in cores:
                core.unguard(instance)
        guards.set(cut_off, reached)

    return finish


class RealTcal:
    """The TCAL entry points a run uses (local and container mode alike),
    imported only when a run starts: unit tests pass fakes instead."""

    def __init__(self) -> None:
        from collapsar.tcal import Shaping, TcTree, check_kernel
        from collapsar.tcal.active import ActiveTcTree

        self.Shaping, self.TcTree, self.check_kernel = Shaping, TcTree, check_kernel
        self.ActiveTcTree = ActiveTcTree

    @staticmethod
    def counters_problem() -> str | None:
        """Why the eBPF counters cannot load here (None: they can)."""
        from collapsar.errors import CollapsarError
        from collapsar.tcal.counters import BTF_PATH, load_library

        try:
            load_library()
        except CollapsarError as error:
            return str(error)
        return None if BTF_PATH.exists() else f"the kernel has no BTF ({BTF_PATH})"

    @staticmethod
    def counters_factory(ifname: str, netns: str):
        from collapsar.tcal.counters import Counters

        return Counters(ifname, netns=netns)

    @staticmethod
    def guards(host_ifnames: Mapping[str, str]) -> InstanceGuards:
        """Each instance's guard at its veth's host side (collapsar.tcal.guard)."""
        from collapsar.tcal.guard import Guards

        return Guards(host_ifnames)


def real_tcal() -> RealTcal:
    return RealTcal()
