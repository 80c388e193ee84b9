"""Traffic classes (collapsar.trafficclasses) in an instance's tree.

With classes, a destination's class (or a shared class: collapsar.tcal.active)
has no leaf of its own: it has a child class per traffic class, each with
the leaf (netem or pfifo) the destination's class would have had, and u32
nodes on the destination's class send each packet to its child:

    1:N     the destination's class: rate = ceil = the path's rate (as without classes)
    1:N+S   child of class 0: rate RATE_BPS, ceil unlimited, prio = its
            priority, quantum = its weight x a full frame; leaf (N+S):
    1:N+2S  child of class 1 ...
    u32 on 1:N, node i of its root table per match entry, in the order
            written, the unmatched traffic's node last (matching every packet)

Every byte a child sends is borrowed from its destination's class (a child's
own rate is 1 byte/s), and htb lends to the borrowing children of the
lowest prio first, across every class of the tree: a path's higher class
goes before its lower ones, and behind the egress token bucket (a tbf above
the htb) the highest class of any path goes first.  Children of one prio
take turns by their quanta (htb's deficit round robin).  Each child's leaf
is its own queue, sized as the path's leaf would be.

S (the stride) divides the 16-bit minor space: destination classes take the
minors below 0x10 + S, class k's child of destination N is N + (k + 1) x S,
and its leaf's handle is that minor (as every leaf's here).  So with K
classes an interface holds (0xffff - 0x10) / (K + 1) destinations.

A packet's header fields are read at fixed offsets of the IPv4 header: the
DSCP in the second byte, the protocol at 9, the ports at 20 and 22 only
when the header has no options (IHL 5) and the packet is no later fragment;
a port match without a protocol is two nodes, TCP's and UDP's.
"""

from __future__ import annotations

from collapsar.tcal import nlmsg as m
from collapsar.tcal.layout import FIRST_DEST_MINOR, LAST_DEST_MINOR, ROOT_MAJOR, classid, format_handle
from collapsar.tcal.plan import HtbCalculator, HtbParams
from collapsar.trafficclasses import PORT_PROTOCOLS, Match, TrafficClasses

RATE_BPS = 8  # a child's own rate: 1 byte/s, all else borrowed
# Keys: (mask, value, byte offset in the IPv4 header), big-endian words.
IHL_5 = (0x0F000000, 0x05000000, 0)
FIRST_FRAGMENT = (0x00001FFF, 0, 4)


def match_keys(match: Match) -> list[list[tuple[int, int, int]]]:
    """The u32 nodes (each a list of keys, all of which must fit) of one match entry."""
    keys: list[tuple[int, int, int]] = []
    if match.dscp is not None:
        keys.append((0x00FC0000, match.dscp << 18, 0))
    has_ports = match.src_port is not None or match.dst_port is not None
    if has_ports:
        keys += [IHL_5, FIRST_FRAGMENT]
        mask = (0xFFFF0000 if match.src_port is not None else 0) | (0xFFFF if match.dst_port is not None else 0)
        keys.append((mask, ((match.src_port or 0) << 16) | (match.dst_port or 0), 20))
    protocols = [match.protocol] if match.protocol is not None else (list(PORT_PROTOCOLS) if has_ports else [None])
    return [keys + ([] if p is None else [(0x00FF0000, p << 16, 8)]) for p in protocols]


class ClassLayout:
    """The child classes and filter nodes of an interface's traffic classes."""

    def __init__(self, classes: TrafficClasses, *, wire_overhead: bool, mtu_bytes: int = 1500):
        self.classes = classes
        htb = HtbCalculator(wire_overhead=wire_overhead, mtu_bytes=mtu_bytes)
        count = len(classes.classes)
        self.stride = (LAST_DEST_MINOR - FIRST_DEST_MINOR + 1) // (count + 1)
        self.last_parent = FIRST_DEST_MINOR + self.stride - 1
        ceil = htb(None)
        self.children: list[tuple[HtbParams, HtbParams]] = [
            (htb(RATE_BPS)._replace(prio=c.priority, quantum_bytes=c.weight * htb.frame), ceil) for c in classes.classes
        ]
        # (keys, class index) in the order the nodes sit, the catch-all last
        self.rules: list[tuple[list[tuple[int, int, int]], int]] = [
            (keys, index)
            for index, klass in enumerate(classes.classes)
            for match in klass.matches
            for keys in match_keys(match)
        ]
        self.rules.append(([(0, 0, 0)], classes.default_index))

    def child_minors(self, parent_minor: int) -> list[int]:
        return [parent_minor + (k + 1) * self.stride for k in range(len(self.children))]

    def create(self, ifindex: int, parent_minor: int, key: str | None) -> tuple[list[m.Request], list[m.Request]]:
        """The children's classes, and the filter nodes (sent once the
        children's leaves are there) of one destination's class."""
        parent = classid(ROOT_MAJOR, parent_minor)
        who = f"destination {key}: " if key else ""
        classes, nodes = [], []
        minors = self.child_minors(parent_minor)
        for (rate, ceil), minor, klass in zip(self.children, minors, self.classes.classes):
            cid = classid(ROOT_MAJOR, minor)
            body = m.tcmsg(ifindex, cid, parent) + m.kind("htb") + m.htb_rate_ceil_options(rate, ceil)
            what = f"{who}create class {format_handle(cid)} (traffic class {klass.name})"
            classes.append(m.Request(m.RTM_NEWTCLASS, m.CREATE, body, what, key))
        for node, (keys, index) in enumerate(self.rules, start=1):
            # The node's id alone: the u32 filters of one htb share their
            # tables' ids, so the kernel gives this class's root table its
            # own (not 800:), and a handle without one means that table.
            target = classid(ROOT_MAJOR, minors[index])
            what = f"{who}create u32 node ::{node:x} on {format_handle(parent)} (traffic classes)"
            nodes.append(
                m.Request(m.RTM_NEWTFILTER, m.CREATE, m.u32_rule(ifindex, parent, node, keys, target), what, key)
            )
        return classes, nodes

    def delete(self, ifindex: int, parent_minor: int, key: str | None) -> list[m.Request]:
        """What must go before the destination's class can: its filter nodes
        (they hold the children), then the children (their leaves go with them)."""
        parent = classid(ROOT_MAJOR, parent_minor)
        who = f"destination {key}: " if key else ""
        reqs = [
            m.Request(
                m.RTM_DELTFILTER,
                0,
                m.filters_flush(ifindex, parent),
                f"{who}delete the filters on {format_handle(parent)}",
                key,
            )
        ]
        for minor in self.child_minors(parent_minor):
            cid = classid(ROOT_MAJOR, minor)
            reqs.append(
                m.Request(
                    m.RTM_DELTCLASS, 0, m.tcmsg(ifindex, cid, parent), f"{who}delete class {format_handle(cid)}", key
                )
            )
        return reqs

    def describe(self) -> list[str]:
        lines = [
            f"traffic classes: each destination's class 1:N has no leaf of its own but a child per class "
            f"(1:N+{self.stride:x} and on), each with the leaf the class would have had:"
        ]
        for k, (klass, (rate, _)) in enumerate(zip(self.classes.classes, self.children)):
            lines.append(
                f"  child 1:N+{(k + 1) * self.stride:x} {klass.describe()}: rate 1 B/s ceil unlimited, "
                f"prio {rate.prio}, quantum {rate.quantum_bytes} B"
            )
        for node, (keys, index) in enumerate(self.rules, start=1):
            fields = (
                ", ".join(f"{value:08x}/{mask:08x} at {off}" for mask, value, off in keys if mask) or "every packet"
            )
            lines.append(f"  filter u32 on 1:N node ::{node:x}: {fields} -> {self.classes.classes[index].name}")
        return lines
