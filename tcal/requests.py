"""The netlink requests of one interface's tree, made but not sent.

`TreeRequests` turns the plan's numbers (collapsar.tcal.plan) and the
handles (collapsar.tcal.layout) into `nlmsg.Request`s, each with the text an
error about it will carry; `TcTree` decides which to send and when.
"""

from __future__ import annotations

from collapsar.tcal import nlmsg as m
from collapsar.tcal.bucket import BUCKET_HANDLE, TREE_PARENT, TbfParams, tbf_options
from collapsar.tcal.classes import ClassLayout
from collapsar.tcal.dest import Dest
from collapsar.tcal.layout import (
    BLACKHOLE_MINOR,
    DEFAULT_MINOR,
    ROOT_MAJOR,
    U32_DIVISOR,
    U32_LEVEL1_HTID,
    U32Slot,
    classid,
    format_handle,
    queue_handle,
)
from collapsar.tcal.plan import HtbParams, LeafParams, TreePlan

ROOT = classid(ROOT_MAJOR, 0)
DEFAULT = classid(ROOT_MAJOR, DEFAULT_MINOR)
BLACKHOLE = classid(ROOT_MAJOR, BLACKHOLE_MINOR)
# u32's root table 800: holds, in node order, the cut of every path (node 1,
# there only while the tree is cut whole) and the link to the hash tables.
CUT_ALL_HANDLE = (0x800 << 20) | 1
ROOT_LINK_HANDLE = (0x800 << 20) | 2


class TreeRequests:
    """`bucket`: the instance's egress token bucket (collapsar.tcal.bucket),
    a tbf at the root with the htb tree as its child; None: the htb is the root."""

    def __init__(self, ifindex: int, bucket: TbfParams | None = None, classes: ClassLayout | None = None):
        """`classes`: the instance's traffic classes (collapsar.tcal.classes):
        each shaped class then has a child per traffic class instead of a leaf."""
        self.ifindex = ifindex
        self.bucket = bucket
        self.classes = classes

    def roots(self) -> list[m.Request]:
        """The root qdisc: the htb 1:, under the bucket's tbf if there is one."""
        if self.bucket is None:
            return [
                m.Request(
                    m.RTM_NEWQDISC, m.CREATE, m.htb_root(self.ifindex, ROOT, DEFAULT_MINOR), "create root qdisc 1: htb"
                )
            ]
        tbf = m.tcmsg(self.ifindex, BUCKET_HANDLE, m.TC_H_ROOT) + m.kind("tbf") + tbf_options(self.bucket)
        htb = m.htb_root(self.ifindex, ROOT, DEFAULT_MINOR, parent=TREE_PARENT)
        return [
            m.Request(m.RTM_NEWQDISC, m.CREATE, tbf, "create root qdisc 8000: tbf (the egress token bucket)"),
            m.Request(m.RTM_NEWQDISC, m.CREATE, htb, "create qdisc 1: htb under 8000:1"),
        ]

    def base(self, plan: TreePlan) -> list[m.Request]:
        """Under the root: the default class, the blackhole and the u32 hash table 1:."""
        return [
            self.klass(DEFAULT, plan.default_htb, m.CREATE, "create default class 1:1", None),
            self.klass(BLACKHOLE, plan.default_htb, m.CREATE, "create blackhole class 1:2", None),
            *self.leaf(BLACKHOLE_MINOR, plan.blackhole_leaf, True, m.CREATE, None),
            m.Request(
                m.RTM_NEWTFILTER,
                m.CREATE,
                m.u32_table(self.ifindex, ROOT, U32_LEVEL1_HTID, U32_DIVISOR),
                "create u32 hash table 1:",
            ),
        ]

    def root_link(self) -> m.Request:
        """The last of setup: from then on packets reach the hash tables."""
        return m.Request(
            m.RTM_NEWTFILTER,
            m.CREATE,
            m.u32_link(self.ifindex, ROOT, ROOT_LINK_HANDLE, None, U32_LEVEL1_HTID, 0xFF00),
            "create u32 root node 800::2 -> hash table 1:",
        )

    def cut_all(self) -> m.Request:
        """Every IPv4 packet to the blackhole, ahead of the hash tables."""
        body = m.u32_catch_all(self.ifindex, ROOT, CUT_ALL_HANDLE, BLACKHOLE)
        return m.Request(m.RTM_NEWTFILTER, m.CREATE, body, "cut every path (u32 node 800::1 -> 1:2)")

    def restore_all(self) -> m.Request:
        body = m.u32_delete(self.ifindex, ROOT, CUT_ALL_HANDLE)
        return m.Request(m.RTM_DELTFILTER, 0, body, "restore every path (delete u32 node 800::1)")

    def delete_root(self) -> m.Request:
        if self.bucket is not None:
            body = m.qdisc_delete(self.ifindex, BUCKET_HANDLE, m.TC_H_ROOT)
            return m.Request(m.RTM_DELQDISC, 0, body, "delete root qdisc 8000: (the bucket and the tree under it)")
        return m.Request(m.RTM_DELQDISC, 0, m.qdisc_delete(self.ifindex, ROOT, m.TC_H_ROOT), "delete root qdisc 1:")

    def create_dest(self, dest: Dest, htb: HtbParams, new_table: bool, reuse_filter: bool) -> list[m.Request]:
        """The destination's class, leaf and filter node; `new_table`: its
        second-level hash table is made first (and linked in after the node);
        `reuse_filter`: its node is there already (a removed destination
        added again), pointed at the blackhole."""
        ip = dest.shaping.dst_ip
        reqs = self.class_and_leaf(dest, htb)
        if reuse_filter:
            reqs.append(self.filter(dest.slot, ip, dest.classid, f"destination {ip}: point filter at class"))
            return reqs
        return reqs + self.filter_node(dest.slot, ip, dest.classid, new_table)

    def class_and_leaf(self, dest: Dest, htb: HtbParams) -> list[m.Request]:
        """The destination's own class and its leaf, made."""
        ip = dest.shaping.dst_ip
        return self.shaped_class(dest.minor, htb, dest.leaf, f"destination {ip}: create class", ip)

    def shaped_class(self, minor: int, htb: HtbParams, leaf: LeafParams, what: str, key: str | None) -> list[m.Request]:
        """A class 1:minor with its leaf, or with traffic classes its
        children, their leaves and the nodes that classify into them."""
        cid = classid(ROOT_MAJOR, minor)
        reqs = [self.klass(cid, htb, m.CREATE, f"{what} {format_handle(cid)}", key)]
        if self.classes is None:
            return reqs + self.leaf(minor, leaf, True, m.CREATE, key)
        children, nodes = self.classes.create(self.ifindex, minor, key)
        return reqs + children + self.leaves(minor, leaf, True, m.CREATE, key) + nodes

    def leaves(self, minor: int, leaf: LeafParams, with_table: bool, flags: int, key: str | None) -> list[m.Request]:
        """The leaves of class 1:minor made or changed: its own, or its
        traffic classes' (one each, alike)."""
        if self.classes is None:
            return self.leaf(minor, leaf, with_table, flags, key)
        return [r for child in self.classes.child_minors(minor) for r in self.leaf(child, leaf, with_table, flags, key)]

    def filter_node(self, slot: U32Slot, ip: str, target: int, new_table: bool) -> list[m.Request]:
        """A destination's u32 node, pointed at `target`; `new_table`: its
        second-level hash table is made first (and linked in after the node)."""
        htid = slot.level2_htid
        reqs = []
        if new_table:
            reqs.append(
                m.Request(
                    m.RTM_NEWTFILTER,
                    m.CREATE,
                    m.u32_table(self.ifindex, ROOT, htid, U32_DIVISOR),
                    f"destination {ip}: create u32 hash table {htid:x}:",
                    ip,
                )
            )
        # The node goes in before its table is linked in: no packet meets a half-made table.
        reqs.append(
            m.Request(
                m.RTM_NEWTFILTER,
                m.CREATE,
                m.u32_match(self.ifindex, ROOT, slot, ip, target, create=True),
                f"destination {ip}: create u32 node {u32_handle(slot.handle)}",
                ip,
            )
        )
        if new_table:
            bucket = (U32_LEVEL1_HTID << 20) | (slot.level1_bucket << 12)
            reqs.append(
                m.Request(
                    m.RTM_NEWTFILTER,
                    m.CREATE,
                    m.u32_link(self.ifindex, ROOT, bucket | 1, bucket, htid, 0xFF),
                    f"destination {ip}: link u32 bucket 1:{slot.level1_bucket:x} -> table {htid:x}:",
                    ip,
                )
            )
        return reqs

    def delete_shared(self, cid: int) -> list[m.Request]:
        """A shared class (collapsar.tcal.active) none of whose destinations is left."""
        return self._delete(cid, f"delete shared class {format_handle(cid)}", None)

    def delete_class(self, dest: Dest) -> list[m.Request]:
        ip = dest.shaping.dst_ip
        return self._delete(dest.classid, f"destination {ip}: delete class {format_handle(dest.classid)}", ip)

    def _delete(self, cid: int, what: str, key: str | None) -> list[m.Request]:
        """A class and what hangs from it: htb refuses to delete a class with
        children, or one a filter points at."""
        first = [] if self.classes is None else self.classes.delete(self.ifindex, cid & 0xFFFF, key)
        return first + [m.Request(m.RTM_DELTCLASS, 0, m.tcmsg(self.ifindex, cid, ROOT), what, key)]

    def klass(self, cid: int, htb: HtbParams, flags: int, what: str, key: str | None) -> m.Request:
        """An htb class made (flags m.CREATE) or changed (m.CHANGE)."""
        return m.Request(m.RTM_NEWTCLASS, flags, m.ClassTemplate(self.ifindex, cid, ROOT).body(htb), what, key)

    def leaf(self, minor: int, leaf: LeafParams, with_table: bool, flags: int, key: str | None) -> list[m.Request]:
        """A class's leaf qdisc made or changed, and the queue after its delay
        (netem's child pfifo, collapsar.tcal.plan) if it has one;
        `with_table`: netem's distribution table goes along (it has a jitter to shape)."""
        verb = "create" if flags else "change"
        who = f"destination {key}: " if key else ""
        handle = classid(minor, 0)
        reqs = [
            m.Request(
                m.RTM_NEWQDISC,
                flags,
                m.leaf_body(
                    self.ifindex, handle, classid(ROOT_MAJOR, minor), leaf, with_table and bool(leaf.jitter_us)
                ),
                f"{who}{verb} leaf {minor:x}: {leaf.kind}",
                key,
            )
        ]
        if leaf.queue_pkts:
            queue = queue_handle(minor)
            body = m.leaf_body(self.ifindex, queue, handle | 1, LeafParams("pfifo", leaf.queue_pkts))
            reqs.append(m.Request(m.RTM_NEWQDISC, flags, body, f"{who}{verb} queue {queue >> 16:x}: pfifo", key))
        return reqs

    def filter(self, slot: U32Slot, ip: str, target: int, what: str) -> m.Request:
        """The destination's u32 node pointed at `target` (its class, or the blackhole)."""
        return m.Request(
            m.RTM_NEWTFILTER, m.CHANGE, m.u32_match(self.ifindex, ROOT, slot, ip, target, create=False), what, ip
        )


def u32_handle(handle: int) -> str:
    return f"{handle >> 20:x}:{(handle >> 12) & 0xFF:x}:{handle & 0xFFF:x}"
