"""ActiveTcTree: a TcTree whose destinations share classes until they carry traffic.

Why it exists: every htb class binds a filter block, and for an interface
without tc offload (veth) the kernel records each bound block in one
host-wide list that it searches linearly, under one global mutex, on every
bind (flow_indr_dev_setup_offload in net/core/flow_offload.c).  A class then
costs time in proportion to the classes already on the host, all instances
together: N instances with a class per destination make N^2 classes, and
bringing them up costs about N^4 (400 instances took 636 s where 200 took
17 s; docs/scale.md has the profile).

Here a destination starts *dormant*: its u32 node points at a *shared class*,
one per distinct record (rate, delay, jitter, distribution, loss) in this
tree, so an instance whose destinations all have the same path (a star) has
one class instead of N-1.  `activate(ips)` gives destinations their own
class (made, then the node re-pointed): the emulation manager calls it in
the period after the eBPF counters first see a byte to them
(run/skeleton.py), so a flow shares a class with other new flows to
destinations of the same record for at most one period, and from then on is
shaped exactly as TcTree shapes it.  A dormant destination's changes move it
to the shared class of its new record; a shared class left without members
is deleted.  Active destinations are TcTree's own and behave as there.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from collapsar.errors import CollapsarError
from collapsar.model import shaping_values
from collapsar.tcal import nlmsg as m
from collapsar.tcal.contract import ShapingChange
from collapsar.tcal.dest import Dest, unchecked
from collapsar.tcal.layout import ROOT_MAJOR, U32Slot, classid, format_handle
from collapsar.tcal.nlsock import KernelFailure
from collapsar.tcal.plan import LeafParams, Shaping, changed_leaf, check_unique, leaf_params
from collapsar.tcal.requests import BLACKHOLE
from collapsar.tcal.tree import TcTree, duplicate_ratio, kernel_leaf

_shared_of = operator.attrgetter("shared")


@dataclass(eq=False)
class Shared:
    """A class the dormant destinations of one record and one group go through."""

    key: tuple  # (shaping_values of its record, group)
    record: Shaping  # its members' record (the address is one member's)
    minor: int
    leaf: LeafParams
    members: set[str] = field(default_factory=set)

    @property
    def classid(self) -> int:
        return classid(ROOT_MAJOR, self.minor)

    @property
    def group(self) -> Hashable:
        return self.key[1]


@dataclass(eq=False)
class Dormant:
    """A destination without a class of its own: its record is its shared
    class's, so a class changed in place changes all of them at once."""

    ip: str
    slot: U32Slot
    shared: Shared
    cut: bool = False

    @property
    def shaping(self) -> Shaping:
        return unchecked(self.shared.record, dst_ip=self.ip)


class ActiveTcTree(TcTree):
    """TcTree's contract (collapsar.tcal.contract.ShapingTree) with classes
    made only for destinations that carry traffic (see the module's text)."""

    def __init__(self, *args, **kwargs):
        """TcTree's arguments."""
        super().__init__(*args, **kwargs)
        self._dormant: dict[str, Dormant] = {}
        self._shared: dict[tuple, Shared] = {}

    @property
    def shapings(self) -> dict[str, Shaping]:
        out = super().shapings
        out.update((ip, d.shaping) for ip, d in self._dormant.items())
        return out

    @property
    def dormant(self) -> frozenset[str]:
        """Destinations still going through a shared class."""
        return frozenset(self._dormant)

    @property
    def shared_classes(self) -> dict[str, int]:
        """Each shared class's handle -> how many destinations it holds."""
        return {format_handle(s.classid): len(s.members) for s in self._shared.values()}

    def setup(self, shapings: Sequence[Shaping], groups: Mapping[str, Hashable] | None = None) -> None:
        """Destinations of one record share a class, and of one group too
        when `groups` is given: the run passes the timeline's changes, so
        that a later link change moves whole classes (see ShapingTree.setup)."""
        check_unique(shapings)
        plan = self._open([])  # no class per destination: the plan holds the base only
        self._limit_gso([s.rate_bps for s in shapings])
        reqs = self._requests.base(plan)
        tables: set[int] = set()
        group_of = (groups or {}).get
        for s in shapings:
            shared = self._shared_for(s, group_of(s.dst_ip), reqs, [])
            slot = self._layout.place(s.dst_ip)
            reqs += self._requests.filter_node(slot, s.dst_ip, shared.classid, self._new_table(slot, tables))
            self._dormant[s.dst_ip] = Dormant(s.dst_ip, slot, shared)
            shared.members.add(s.dst_ip)
        self._finish(reqs, tables)
        self._duplicate_from_start(shapings)

    def activate(self, dst_ips: Iterable[str]) -> int:
        """Own classes for these destinations (those already active, removed or
        unknown are skipped); returns how many were made."""
        self._need_setup()
        reqs: list[m.Request] = []
        made: list[Dormant] = []
        for ip in dst_ips:
            d = self._dormant.pop(ip, None)
            if d is None:
                continue
            minor = self._minors.take()
            shaping = d.shaping
            leaf = leaf_params(shaping, netem=self.netem, mtu_bytes=self._mtu)
            dest = Dest(shaping, minor, leaf, d.slot, self._template(minor), None, cut=d.cut)
            reqs += self._requests.class_and_leaf(dest, self._htb(shaping.rate_bps))
            if not d.cut:
                reqs.append(self._requests.filter(d.slot, ip, dest.classid, f"destination {ip}: point filter at class"))
            dest.table_sent = leaf.distribution if leaf.jitter_us else None
            self._dests[ip] = dest
            d.shared.members.discard(ip)
            made.append(d)
        if not made:
            return 0
        emptied = self._delete_empty({d.shared for d in made}, reqs)

        def then(failures: list[KernelFailure]) -> None:
            if not failures:
                self._free(emptied)
                return
            refused = {f.request.key for f in failures}
            for d in made:  # a refused one goes back to its shared class
                ip = d.ip
                if ip in refused:
                    del self._dests[ip]
                    self._dormant[ip] = d
                    d.shared.members.add(ip)
            self._keep(emptied)
            self._raise(failures, "activate")

        self._socket.submit(reqs, then)
        return len(made)

    def change_many(self, changes: Mapping[str, ShapingChange]) -> None:
        """Grouped by change object (the core makes one per transition), then
        as change_groups."""
        groups: dict[int, tuple[list[str], ShapingChange]] = {}
        for ip, change in changes.items():
            group = groups.get(id(change))
            if group is None:
                groups[id(change)] = ([ip], change)
            else:
                group[0].append(ip)
        self.change_groups(list(groups.values()))

    def change_groups(self, groups: Sequence[tuple[Sequence[str], ShapingChange]]) -> None:
        """A group's dormant destinations are split by shared class (a link
        change: usually one, the class lineages keep them in), the new record
        made and checked once per (class, values); active ones change as in
        TcTree.  Per destination, only C-level map and set work."""
        self._need_setup()
        rest: dict[str, ShapingChange] = {}
        moves: list[tuple[Shaping, Shared, list[str]]] = []
        made: dict[tuple[Shared, tuple], list[str]] = {}  # equal changes of other groups join
        for ips, change in groups:
            found = list(map(self._dormant.get, ips))
            if None in found:
                rest.update((ip, change) for ip, d in zip(ips, found) if d is None)
                ips = [ip for ip in ips if ip in self._dormant]
                found = [d for d in found if d is not None]
            if not found:
                continue
            classes = set(map(_shared_of, cast("list[Dormant]", found)))
            if len(classes) == 1:
                by_class = {classes.pop(): list(ips)}
            else:  # the classes' own member sets say which of ips each holds
                wanted = set(ips)
                by_class = {shared: list(shared.members & wanted) for shared in classes}
            for shared, members in by_class.items():
                try:
                    new = dataclasses.replace(unchecked(shared.record, dst_ip=members[0]), **change.values())
                except CollapsarError as exc:
                    raise CollapsarError(f"{self._where()}: {exc}") from None
                same = made.get((shared, shaping_values(new)))
                if same is None:
                    made[(shared, shaping_values(new))] = members
                    moves.append((new, shared, members))
                else:
                    same += members
        if rest:
            super().change_many(rest)
        if moves:
            self._move(moves)

    def add(self, shaping: Shaping) -> None:
        self._need_setup()
        ip = shaping.dst_ip
        if ip in self._dests or ip in self._dormant:
            raise CollapsarError(f"{self._where()}: destination {ip} is already in the tree")
        leaf_params(shaping, netem=self.netem, mtu_bytes=self._mtu)  # refuses what this tree cannot shape
        self._need_duplicator(duplicate_ratio(shaping))
        reqs: list[m.Request] = []
        shared = self._shared_for(shaping, None, reqs, [])
        removed_slot = self._removed.pop(ip, None)
        tables: set[int] = set()
        if removed_slot is not None:
            slot = removed_slot
            reqs.append(self._requests.filter(slot, ip, shared.classid, f"destination {ip}: point filter at class"))
        else:
            slot = self._layout.place(ip)
            reqs += self._requests.filter_node(slot, ip, shared.classid, self._new_table(slot, tables))
        self._dormant[ip] = Dormant(ip, slot, shared)
        shared.members.add(ip)
        self._level2 |= tables

        def then(failures: list[KernelFailure]) -> None:
            if not failures:
                self._duplicate({ip: duplicate_ratio(shaping)})
                return
            del self._dormant[ip]
            shared.members.discard(ip)
            self._level2 -= tables
            if removed_slot is not None:
                self._removed[ip] = removed_slot
            self._raise(failures, "add")

        self._socket.submit(reqs, then)
        self._limit_gso([shaping.rate_bps])

    def remove(self, dst_ip: str) -> None:
        d = self._dormant.get(dst_ip)
        if d is None:
            super().remove(dst_ip)
            return
        reqs = [self._requests.filter(d.slot, dst_ip, BLACKHOLE, f"destination {dst_ip}: point filter at blackhole")]
        del self._dormant[dst_ip]
        d.shared.members.discard(dst_ip)
        self._removed[dst_ip] = d.slot
        emptied = self._delete_empty({d.shared}, reqs)

        def then(failures: list[KernelFailure]) -> None:
            if failures:
                del self._removed[dst_ip]
                self._dormant[dst_ip] = d
                d.shared.members.add(dst_ip)
                self._keep(emptied)
                self._raise(failures, "remove")
            self._free(emptied)
            self._duplicate({dst_ip: 0.0})

        self._socket.submit(reqs, then)

    def teardown(self) -> None:
        super().teardown()
        self._dormant.clear()
        self._shared.clear()

    # --- helpers ---------------------------------------------------------------

    def _point(self, dst_ip: str, cut: bool) -> None:
        d = self._dormant.get(dst_ip)
        if d is None:
            super()._point(dst_ip, cut)
            return
        target = BLACKHOLE if cut else d.shared.classid
        was, d.cut = d.cut, cut

        def then(failures: list[KernelFailure]) -> None:
            if failures:
                d.cut = was
                self._raise(failures, "cut" if cut else "restore")

        verb = "cut" if cut else "restore"
        what = f"destination {dst_ip}: {verb} path (filter -> {format_handle(target)})"
        self._socket.submit([self._requests.filter(d.slot, dst_ip, target, what)], then)

    def _move(self, moves: list[tuple[Shaping, Shared, list[str]]]) -> None:
        """Groups of dormant destinations of one shared class take a new
        record.  A group that is the whole class (a link change: every
        path across it changes alike, and the run groups destinations by
        their changes) changes the class in place: one class and leaf
        message for all of them.  Otherwise the group goes to the shared
        class of its new record (made if new), one filter message per
        destination, and classes left empty are deleted after the nodes
        have left them."""
        reqs: list[m.Request] = []
        made: list[Shared] = []
        retagged: list[tuple[Shared, tuple, Shaping, LeafParams]] = []
        moved: list[tuple[Dormant, Shared]] = []
        left: set[Shared] = set()
        dups: dict[str, float] = {}  # new duplicate ratios, in force once the requests are
        for new, _, _ in moves:  # before anything changes
            self._need_duplicator(duplicate_ratio(new))
        for new, shared, members in moves:
            key = (shaping_values(new), shared.group)
            if key == shared.key:
                continue
            ratio = duplicate_ratio(new)
            if ratio != duplicate_ratio(shared.record):
                dups.update(dict.fromkeys(members, ratio))
            if len(members) == len(shared.members) and key not in self._shared:
                retagged.append((shared, shared.key, shared.record, shared.leaf))
                self._change_in_place(shared, key, new, reqs)
                continue
            target = self._shared_for(new, shared.group, reqs, made)
            what = f"point filter at shared class {format_handle(target.classid)}"
            for d in map(self._dormant.__getitem__, members):
                moved.append((d, shared))
                shared.members.discard(d.ip)
                target.members.add(d.ip)
                d.shared = target
                if not d.cut:
                    reqs.append(self._requests.filter(d.slot, d.ip, target.classid, f"destination {d.ip}: {what}"))
            left.add(shared)
        emptied = self._delete_empty(left, reqs)
        if not reqs and not dups:
            return

        def then(failures: list[KernelFailure]) -> None:
            if not failures:
                self._free(emptied)
                self._duplicate(dups)
                return
            for d, shared in reversed(moved):
                d.shared.members.discard(d.ip)
                d.shared = shared
                shared.members.add(d.ip)
            for shared, key, record, leaf in reversed(retagged):
                del self._shared[shared.key]
                shared.key, shared.record, shared.leaf = key, record, leaf
                self._shared[key] = shared
            self._keep(emptied)
            for s in made:  # its minor stays taken: the kernel may hold the class
                if not s.members:
                    self._shared.pop(s.key, None)
            self._raise(failures, "change")

        self._socket.submit(reqs, then)

    def _change_in_place(self, shared: Shared, key: tuple, new: Shaping, reqs: list[m.Request]) -> None:
        """The class (all of whose members take `new`) takes the new record."""
        what = f"change shared class {format_handle(shared.classid)}"
        if new.rate_bps != shared.record.rate_bps:
            reqs.append(self._requests.klass(shared.classid, self._htb(new.rate_bps), m.CHANGE, what, None))
        leaf = leaf_params(new, netem=self.netem, mtu_bytes=self._mtu)
        if not self.all_cut and not all(self._dormant[ip].cut for ip in shared.members):
            leaf = changed_leaf(leaf, new, shared.leaf, shared.record)  # else sized afresh: TcTree._unused
        if kernel_leaf(leaf) != kernel_leaf(shared.leaf):
            reqs += self._requests.leaves(shared.minor, leaf, True, m.CHANGE, None)
        del self._shared[shared.key]
        shared.key, shared.record, shared.leaf = key, new, leaf
        self._shared[key] = shared

    def _shared_for(self, shaping: Shaping, group: Hashable, reqs: list[m.Request], made: list[Shared]) -> Shared:
        """The shared class of `shaping`'s record in `group`; its requests are
        added to `reqs` (and the class to `made`) when it is new."""
        key = (shaping_values(shaping), group)
        shared = self._shared.get(key)
        if shared is None:
            minor = self._minors.take()
            leaf = leaf_params(shaping, netem=self.netem, mtu_bytes=self._mtu)
            shared = self._shared[key] = Shared(key, shaping, minor, leaf)
            reqs += self._requests.shaped_class(minor, self._htb(shaping.rate_bps), leaf, "create shared class", None)
            made.append(shared)
        return shared

    def _delete_empty(self, candidates: set[Shared], reqs: list[m.Request]) -> list[Shared]:
        """Delete requests for the candidates left without members (after
        `reqs`' own, so that no node points at them any more)."""
        emptied = [s for s in candidates if not s.members]
        for s in emptied:
            del self._shared[s.key]
            reqs += self._requests.delete_shared(s.classid)
        return emptied

    def _free(self, emptied: list[Shared]) -> None:
        for s in emptied:
            self._minors.free(s.minor)  # only once the class is gone

    def _keep(self, emptied: list[Shared]) -> None:
        """The kernel refused a batch: the classes it was to delete stay ours."""
        for s in emptied:
            self._shared[s.key] = s
