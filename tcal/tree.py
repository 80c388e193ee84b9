"""TcTree: one instance's tc tree on its egress interface, kept in step with the kernel.

The numbers come from `collapsar.tcal.plan`; this module turns them into
netlink requests (`nlmsg`) sent in batches (`nlsock`) and records exactly what
it made, so that `teardown` removes that and nothing else.

Every change is in place: classes and leaves are changed with RTM_NEWTCLASS /
RTM_NEWQDISC without NLM_F_CREATE, filters are re-pointed, never deleted and
re-added (a delete + add leaves a window where the destination is unshaped).
A cut path and a removed destination keep their filter, pointed at the
blackhole class 1:2, so their packets are dropped rather than falling through
to the unshaped default class.

Besides the qdisc tree, the only things changed on the interface are its
gso_max_segs, lowered when a slow path needs it and restored at teardown,
and, only while some destination duplicates packets, the eBPF duplicator's
filter at clsact egress (`collapsar.tcal.duplicate`: netem's own duplication
cannot share a tree with other netems).  A destination's duplicate ratio is
put in force by the completion of the requests that change its record, so a
prepared step (collapsar.tcal.prepared) applies it at its instant too.  A
copy is classified like its original, so on a cut path it follows it into
the blackhole: cut and restore leave the duplicator alone.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Hashable, Iterable, Mapping, Sequence

from collapsar.egress import EgressBucket
from collapsar.errors import CollapsarError, KernelError
from collapsar.tcal import nlmsg as m
from collapsar.tcal.bucket import BUCKET_HANDLE, BUCKET_MAJOR, TbfParams, tbf_params
from collapsar.tcal.check import netem_missing
from collapsar.tcal.classes import ClassLayout
from collapsar.tcal.contract import ShapingChange
from collapsar.tcal.dest import Dest, Saved, put_back_all, saved, unchecked
from collapsar.tcal.duplicate import Duplicator
from collapsar.tcal.layout import (
    LAST_DEST_MINOR,
    ROOT_MAJOR,
    MinorAllocator,
    U32Layout,
    U32Slot,
    classid,
    format_handle,
)
from collapsar.tcal.link import GsoLimit
from collapsar.tcal.nlsock import KernelFailure, RouteSocket, interface_index, interface_mtu
from collapsar.tcal.plan import (
    HtbCalculator,
    LeafParams,
    Shaping,
    TreePlan,
    changed_leaf,
    check_rate,
    gso_max_segs,
    gso_rates_seen,
    leaf_params,
    plan_tree,
)
from collapsar.tcal.requests import BLACKHOLE, ROOT, TreeRequests
from collapsar.trafficclasses import TrafficClasses


class TcTree:
    """Keeps the contract of collapsar.tcal.contract.ShapingTree on the kernel.
    Nothing touches the kernel before `setup`."""

    def __init__(
        self,
        ifname: str,
        netns: str | None = None,
        wire_overhead: bool = True,
        netem: bool = True,
        bucket: EgressBucket | None = None,
        classes: TrafficClasses | None = None,
    ):
        """`bucket`: the instance's egress token bucket, a tbf above the tree
        (collapsar.tcal.bucket); None: the tree's htb is the root.
        `classes`: its traffic classes, a child class per class under every
        shaped class (collapsar.tcal.classes); None: one leaf per class."""
        self.ifname, self.netns = ifname, netns
        self.wire_overhead, self.netem = wire_overhead, netem
        self.bucket = bucket
        self.bucket_params: TbfParams | None = None  # the kernel's numbers, once setup made the bucket
        self.classes = classes
        self._sock: RouteSocket | None = None
        self._stats_sock: RouteSocket | None = None  # bucket_sent_bytes's
        self._requests = TreeRequests(0)  # for the interface's index, known at setup
        self._mtu = 1500
        self._htb = HtbCalculator(wire_overhead=wire_overhead, mtu_bytes=self._mtu)
        self._dests: dict[str, Dest] = {}
        self._removed: dict[str, U32Slot] = {}  # filter kept, pointing at the blackhole
        self._layout = U32Layout()
        self._minors = MinorAllocator()
        self._level2: set[int] = set()
        self._root_made = False
        self._gso: GsoLimit | None = None
        self._gso_rates: list[int | None] = []  # what the limit has seen of the paths' rates (it only lowers)
        self._dup = Duplicator(ifname, netns)  # attaches only once a destination duplicates
        self.all_cut = False  # cut_all in force: every path dropped, whatever each destination's filter says

    # --- public API --------------------------------------------------------

    @property
    def shapings(self) -> dict[str, Shaping]:
        return {ip: d.shaping for ip, d in self._dests.items()}

    @property
    def duplicating(self) -> dict[str, float]:
        """Destination -> duplicate ratio the eBPF duplicator holds (those above 0)."""
        return self._dup.ratios

    def setup(self, shapings: Sequence[Shaping], groups: Mapping[str, Hashable] | None = None) -> None:
        """`groups` is for trees that share classes: here every destination has its own."""
        plan = self._open(shapings)
        reqs = self._requests.base(plan)
        tables: set[int] = set()
        for d in plan.dests:
            self._layout.place(d.shaping.dst_ip)
            self._minors.claim(d.minor)
            dest = Dest(d.shaping, d.minor, d.leaf, d.slot, self._template(d.minor), None)
            reqs += self._create_dest(dest, tables)
            self._dests[d.shaping.dst_ip] = dest
        self._finish(reqs, tables)
        for dest in self._dests.values():
            dest.table_sent = dest.leaf.distribution if dest.leaf.jitter_us else None
        self._duplicate_from_start(shapings)

    def activate(self, dst_ips: Iterable[str]) -> int:
        """Every destination has its own class here: nothing to do (see
        collapsar.tcal.active, whose destinations share classes until then)."""
        return 0

    def _open(self, shapings: Sequence[Shaping]) -> TreePlan:
        """Setup's first half: plan `shapings`, open the socket, make the root
        qdisc alone (if the interface already has one, perhaps even with handle
        1:, nothing of ours may land in it) and take the GSO limit."""
        if self._root_made:
            raise CollapsarError(f"{self._where()}: setup called twice (teardown first)")
        self._mtu = interface_mtu(self.netns, self.ifname)
        layout = None
        if self.classes is not None:
            layout = ClassLayout(self.classes, wire_overhead=self.wire_overhead, mtu_bytes=self._mtu)
        plan = plan_tree(
            shapings,
            wire_overhead=self.wire_overhead,
            netem=self.netem,
            mtu_bytes=self._mtu,
            last_minor=LAST_DEST_MINOR if layout is None else layout.last_parent,
        )
        self._htb = plan.htb
        if self.bucket is not None:
            self.bucket_params = tbf_params(self.bucket, wire_overhead=self.wire_overhead, mtu_bytes=self._mtu)
        self._minors = MinorAllocator(plan.last_minor)
        self._requests = requests = TreeRequests(interface_index(self.netns, self.ifname), self.bucket_params, layout)
        self._sock = RouteSocket(self.netns)
        failures = self._socket.execute(requests.roots())
        if failures:
            self.teardown()
            self._raise(failures, "setup")
        self._root_made = True
        self._gso = GsoLimit(self._sock, requests.ifindex, self.ifname)
        self._limit_gso([s.rate_bps for s in shapings])
        return plan

    def _finish(self, reqs: list[m.Request], tables: set[int]) -> None:
        """Setup's second half: everything under the root, then the root's
        link to the hash tables; undone whole if the kernel refuses any of it."""
        reqs.append(self._requests.root_link())
        failures = self._socket.execute(reqs)
        if failures:
            self.teardown()
            self._raise(failures, "setup")
        self._level2 |= tables

    def _duplicate_from_start(self, shapings: Sequence[Shaping]) -> None:
        """Setup's last step: the duplicator, if any destination duplicates
        (the tree is undone if it cannot attach)."""
        ratios = {s.dst_ip: duplicate_ratio(s) for s in shapings if duplicate_ratio(s)}
        if not ratios:
            return
        try:
            self._dup.set_many(ratios)
        except BaseException:
            self.teardown()
            raise

    def _template(self, minor: int) -> m.ClassTemplate:
        return m.ClassTemplate(self._requests.ifindex, classid(ROOT_MAJOR, minor), ROOT)

    def change(self, dst_ip: str, **values: object) -> None:
        """One destination's change, by field name: `change(ip, rate_bps=10**6)`."""
        try:
            change = ShapingChange.of(**values)
        except CollapsarError as exc:
            raise CollapsarError(f"{self._where()}: destination {dst_ip}: {exc}") from None
        self.change_many({dst_ip: change})

    def change_groups(self, groups: Sequence[tuple[Sequence[str], ShapingChange]]) -> None:
        """Each destination here has a class of its own: one change each."""
        self.change_many({ip: change for ips, change in groups for ip in ips})

    def change_many(self, changes: Mapping[str, ShapingChange]) -> None:
        """Apply every change in one batch; destinations whose requests all
        succeed keep their new state, the others go back to the old one.

        A rate-only change (the sharing loop's case, hundreds per period) takes
        a fast path: one class message from the destination's cached template,
        no re-validation of the other fields, no leaf message unless the queue
        limit has to grow (measured: ~12 us of CPU per change, ~3 us of it in
        the kernel).

        The tree takes the new state when the requests are made, so that later
        calls of the same prepared step (collapsar.tcal.prepared) build on it;
        a refusal puts the refused destinations back."""
        self._need_setup()
        reqs: list[m.Request] = []
        undo: list[tuple[Dest, Saved]] = []  # the state each changed destination had before
        dups: dict[str, float] = {}  # new duplicate ratios, in force once the requests are
        calc, dests = self._htb, self._dests
        try:
            for ip, change in changes.items():
                dest = dests.get(ip) or self._dest(ip)
                if change.rate_only:
                    rate = change.record.rate_bps
                    if rate == dest.shaping.rate_bps:
                        continue
                    sized = dest.sized_for_bps
                    if not self._unused(dest) and (sized is None or (rate is not None and rate <= sized)):
                        check_rate(f"destination {ip}", rate)
                        reqs.append(
                            m.Request(
                                m.RTM_NEWTCLASS,
                                m.CHANGE,
                                dest.template.prefix + m.htb_class_options(calc(rate)),
                                dest.change_what,
                                ip,
                            )
                        )
                        undo.append((dest, saved(dest)))
                        dest.shaping = unchecked(dest.shaping, rate_bps=rate)
                        continue
                before = saved(dest)
                self._stage(dest, change, reqs)
                undo.append((dest, before))
                ratio = duplicate_ratio(dest.shaping)
                if ratio != duplicate_ratio(before[0]):
                    self._need_duplicator(ratio)
                    dups[ip] = ratio
        except BaseException:  # a bad field: nothing is sent, nothing changes
            put_back_all(undo, None)
            raise
        if not reqs and not dups:
            return

        def then(failures: list[KernelFailure]) -> None:
            refused = {f.request.key for f in failures}
            if failures:
                put_back_all(undo, refused)
            self._duplicate({ip: r for ip, r in dups.items() if ip not in refused})
            if failures:
                self._raise(failures, "change")

        self._socket.submit(reqs, then)

    def _stage(self, dest: Dest, change: ShapingChange, reqs: list[m.Request]) -> None:
        """The general change: any fields, class and leaf as needed.  The
        destination takes the new state at once (see change_many)."""
        ip = dest.shaping.dst_ip
        new = dataclasses.replace(dest.shaping, **change.values())
        if new.rate_bps != dest.shaping.rate_bps:
            reqs.append(
                m.Request(m.RTM_NEWTCLASS, m.CHANGE, dest.template.body(self._htb(new.rate_bps)), dest.change_what, ip)
            )
        if self._unused(dest):  # sized afresh for its path (see _unused)
            leaf, sized_for = leaf_params(new, netem=self.netem, mtu_bytes=self._mtu), new.rate_bps
        else:
            sized_for = dest.limit_rate(new)
            leaf = leaf_params(new, netem=self.netem, mtu_bytes=self._mtu, limit_rate_bps=sized_for)
            leaf = changed_leaf(leaf, new, dest.leaf, dest.shaping)
        if leaf != dest.leaf:
            if kernel_leaf(leaf) != kernel_leaf(dest.leaf):
                send_table = bool(leaf.jitter_us) and leaf.distribution != dest.table_sent
                reqs += self._requests.leaves(dest.minor, leaf, send_table, m.CHANGE, ip)
                dest.sized_for_bps = sized_for
                if send_table:
                    dest.table_sent = leaf.distribution
            dest.leaf = leaf
        dest.shaping = new

    def _unused(self, dest: Dest) -> bool:
        """No packet reaches the destination's class now (it is cut, or the
        whole tree is): what it takes next is a path coming (back), whose
        queue is sized for that path alone.  The default sizing only grows
        while the class carries traffic (the sharing loop's rates come and
        go under a running flow); grown from the class a cut instance is
        made with (unlimited, until it joins) it kept a queue sized for an
        unlimited rate for the rest of the run: 1000 packets on a 5 Mbit/s
        path without netem, 31962 with it, where a class made with the path
        has 10 and 21."""
        return dest.cut or self.all_cut

    def add(self, shaping: Shaping) -> None:
        self._need_setup()
        ip = shaping.dst_ip
        if ip in self._dests:
            raise CollapsarError(f"{self._where()}: destination {ip} is already in the tree")
        leaf = leaf_params(shaping, netem=self.netem, mtu_bytes=self._mtu)
        self._need_duplicator(duplicate_ratio(shaping))
        slot = self._layout.place(ip)
        minor = self._minors.take()
        dest = Dest(shaping, minor, leaf, slot, self._template(minor), None)
        tables: set[int] = set()
        removed_slot = self._removed.pop(ip, None)
        reqs = self._create_dest(dest, tables, reuse_filter=removed_slot is not None)
        # In the tree from now on (see change_many); undone if the kernel refuses.
        dest.table_sent = dest.leaf.distribution if dest.leaf.jitter_us else None
        self._dests[ip] = dest
        self._level2 |= tables

        def then(failures: list[KernelFailure]) -> None:
            if not failures:
                self._duplicate({ip: duplicate_ratio(shaping)})
                return
            del self._dests[ip]
            self._minors.free(minor)
            self._level2 -= tables
            if removed_slot is not None:
                self._removed[ip] = removed_slot
            self._raise(failures, "add")

        self._socket.submit(reqs, then)
        self._limit_gso([shaping.rate_bps])

    def remove(self, dst_ip: str) -> None:
        """Drop the destination's class and leaf; its filter stays, pointed at
        the blackhole, so its packets are dropped rather than sent unshaped."""
        dest = self._dest(dst_ip)
        reqs = [
            self._requests.filter(dest.slot, dst_ip, BLACKHOLE, f"destination {dst_ip}: point filter at blackhole"),
            *self._requests.delete_class(dest),
        ]
        del self._dests[dst_ip]
        self._removed[dst_ip] = dest.slot

        def then(failures: list[KernelFailure]) -> None:
            if failures:
                del self._removed[dst_ip]
                self._dests[dst_ip] = dest
                self._raise(failures, "remove")
            self._minors.free(dest.minor)  # only once the class is gone
            self._duplicate({dst_ip: 0.0})

        self._socket.submit(reqs, then)

    def cut(self, dst_ip: str) -> None:
        self._point(dst_ip, cut=True)

    def restore(self, dst_ip: str) -> None:
        self._point(dst_ip, cut=False)

    def cut_all(self) -> None:
        """Drop every destination's packets, in one message (an instance
        disconnected, crashed or gone: its whole tree is cut); each
        destination's class and filter stay as they are."""
        self._whole(cut=True)

    def restore_all(self) -> None:
        """Undo cut_all: each destination's filter decides again."""
        self._whole(cut=False)

    def _whole(self, cut: bool) -> None:
        self._need_setup()
        if self.all_cut == cut:
            return
        self.all_cut = cut

        def then(failures: list[KernelFailure]) -> None:
            if failures:
                self.all_cut = not cut
                self._raise(failures, "cut every path" if cut else "restore every path")

        self._socket.submit([self._requests.cut_all() if cut else self._requests.restore_all()], then)

    def bucket_sent_bytes(self) -> int | None:
        """What the egress token bucket has let through so far, in the
        kernel's frame bytes (its tbf's counter); None without a bucket.
        Read on a socket of its own: the tree's may be mid-batch in another
        thread (the sharing loop, a prepared step)."""
        if self.bucket is None or not self._root_made:
            return None
        if self._stats_sock is None:
            self._stats_sock = RouteSocket(self.netns)
        ifindex = self._requests.ifindex
        what = f"{self._where()}: read the egress bucket"
        for body in self._stats_sock.dump(m.RTM_GETQDISC, m.tcmsg(ifindex, 0, 0), what):
            index, handle, _, _ = m.parse_tcmsg(body)
            if (index, handle) == (ifindex, BUCKET_HANDLE):
                return m.sent_bytes(body)
        raise KernelError(f"{what}: its qdisc {BUCKET_MAJOR:x}: is gone")

    def teardown(self) -> None:
        """Delete the root qdisc (and with it every class, leaf and filter we
        made); a second call, or one after a failed setup, does nothing."""
        if self._stats_sock is not None:
            self._stats_sock.close()
            self._stats_sock = None
        if self._sock is None:
            return
        self._dup.detach()
        if self._gso is not None:
            self._gso.restore()
            self._gso = None
            self._gso_rates = []
        if self._root_made:
            failures = self._sock.execute([self._requests.delete_root()])
            # Gone already (interface or namespace deleted under us) is what we wanted.
            real = [f for f in failures if f.errno not in (errno.ENOENT, errno.EINVAL, errno.ENODEV)]
            if real:
                self._raise(real, "teardown")
        self._sock.close()
        self._sock = None
        self._root_made = False
        self.all_cut = False
        self._dests.clear()
        self._removed.clear()
        self._layout, self._minors, self._level2 = U32Layout(), MinorAllocator(self._minors.last), set()

    # --- requests ----------------------------------------------------------

    def _create_dest(self, dest: Dest, pending_tables: set[int], reuse_filter: bool = False) -> list[m.Request]:
        """Requests that create the destination's class, leaf and filter node;
        second-level tables it needs are noted in `pending_tables`, to be
        recorded once the kernel has accepted them."""
        new_table = not reuse_filter and self._new_table(dest.slot, pending_tables)
        return self._requests.create_dest(dest, self._htb(dest.shaping.rate_bps), new_table, reuse_filter)

    def _new_table(self, slot: U32Slot, pending: set[int]) -> bool:
        """Whether `slot`'s second-level hash table is still to be made (then
        noted in `pending`, recorded once the kernel has accepted it)."""
        htid = slot.level2_htid
        if htid in self._level2 or htid in pending:
            return False
        pending.add(htid)
        return True

    def _point(self, dst_ip: str, cut: bool) -> None:
        dest = self._dest(dst_ip)
        target = BLACKHOLE if cut else dest.classid
        was = dest.cut
        dest.cut = cut

        def then(failures: list[KernelFailure]) -> None:
            if failures:
                dest.cut = was
                self._raise(failures, "cut" if cut else "restore")

        self._socket.submit(
            [
                self._requests.filter(
                    dest.slot,
                    dst_ip,
                    target,
                    f"destination {dst_ip}: {'cut' if cut else 'restore'} path (filter -> {format_handle(target)})",
                )
            ],
            then,
        )

    # --- helpers -------------------------------------------------------------

    def _need_duplicator(self, ratio: float) -> None:
        """Before any request, for a ratio above 0: the duplicator attached
        (with nothing to copy yet), so that a refusal (no build, no BTF)
        comes while nothing has changed, and the ratio's completion is one
        map update, not a program load (~20 ms) after a step's instant."""
        if ratio and not self._dup.attached:
            self._dup.attach()

    def _duplicate(self, ratios: Mapping[str, float]) -> None:
        """Put duplicate ratios in force (0: none); no eBPF work unless some
        destination duplicates or did."""
        dup = self._dup
        for ip, ratio in ratios.items():
            if ratio != dup.ratio(ip):
                dup.set(ip, ratio)

    @property
    def _socket(self) -> RouteSocket:
        assert self._sock is not None, "setup() opens the socket; every other call comes after it"
        return self._sock

    def _limit_gso(self, rates_bps: list[int | None]) -> None:
        self._gso_rates = gso_rates_seen(self._gso_rates + list(rates_bps))
        segs = gso_max_segs(self._gso_rates, self._mtu)  # see plan: super-packets on slow paths
        if segs is not None:
            assert self._gso is not None, "setup() makes the GSO limit before any rate is set"
            self._gso.lower_to(segs)

    def _dest(self, ip: str) -> Dest:
        self._need_setup()
        try:
            return self._dests[ip]
        except KeyError:
            state = "was removed" if ip in self._removed else "is not in the tree"
            raise CollapsarError(f"{self._where()}: destination {ip} {state}") from None

    def _need_setup(self) -> None:
        if not self._root_made:
            raise CollapsarError(f"{self._where()}: the tree is not set up")

    def _where(self) -> str:
        return f"{self.ifname} in netns {self.netns}" if self.netns else self.ifname

    def _raise(self, failures: list[KernelFailure], operation: str) -> None:
        for f in failures:
            if f.errno == errno.ENOENT and b"netem" in f.request.body and f.request.flags & m.NLM_F_CREATE:
                raise netem_missing()
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise KernelError(f"{self._where()}: {operation}: {failures[0]}{more}")


def duplicate_ratio(shaping: Shaping) -> float:
    return shaping.extras.duplicate_ratio


def kernel_leaf(leaf: LeafParams) -> LeafParams:
    """The leaf as the kernel holds it: its duplication is the duplicator's
    (collapsar.tcal.duplicate), so a change of that alone sends no message."""
    return leaf._replace(duplicate_ratio=0.0) if leaf.duplicate_ratio else leaf
