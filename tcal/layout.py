"""Handles and the u32 hash layout of a TCAL tree: pure bookkeeping.

    1:    htb root            1:1  default class (unshaped)
    1:2   blackhole class     1:N  one class per destination, N >= 0x10, leaf N:
                              (netem; its queue, netem's child, 8000+N:)
    u32   800:: -> ht 1: (third octet of the destination) -> ht 0x100+octet3:
          (fourth octet) -> one node per destination, matching its full address

Two levels of 256 buckets keep classification at a constant few lookups for
thousands of destinations, where a flat filter list would be walked linearly.
"""

from __future__ import annotations

import heapq
import ipaddress
import socket
from dataclasses import dataclass

from collapsar.errors import CollapsarError

ROOT_MAJOR = 1
DEFAULT_MINOR = 1
BLACKHOLE_MINOR = 2
FIRST_DEST_MINOR = 0x10
# Leaves take the majors of their classes' minors, below 0x8000; a netem
# leaf's queue (its child pfifo) takes 0x8000 + that: up to 0xfffe, as
# 0xffff is clsact's major, used by the counters.
LAST_DEST_MINOR = 0x7FFE
QUEUE_MAJOR_BASE = 0x8000

U32_LEVEL1_HTID = 0x001
U32_LEVEL2_HTID_BASE = 0x100
U32_DIVISOR = 256
U32_MAX_NODE = 0xFFF


def classid(major: int, minor: int) -> int:
    return (major << 16) | minor


def queue_handle(minor: int) -> int:
    """The handle of the queue (netem's child) under leaf `minor`:."""
    return classid(QUEUE_MAJOR_BASE + minor, 0)


def format_handle(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


@dataclass(frozen=True)
class U32Slot:
    """Where one destination sits in the two-level u32 hash."""

    level1_bucket: int  # third octet
    level2_htid: int
    level2_bucket: int  # fourth octet
    node: int  # 1.. within the bucket (addresses differing only above /16 share one)

    @property
    def handle(self) -> int:
        return (self.level2_htid << 20) | (self.level2_bucket << 12) | self.node


def _packed(dst_ip: str) -> bytes:
    """The address's four bytes.  inet_aton is C where ipaddress costs ~30 us
    of Python, and a run places N^2 destinations; but inet_aton also takes
    "10.1" or octal "010.1.2.3", so only a canonical round trip is trusted."""
    try:
        packed = socket.inet_aton(dst_ip)
        if socket.inet_ntoa(packed) == dst_ip:
            return packed
    except OSError:
        pass
    return ipaddress.IPv4Address(dst_ip).packed  # raises the precise error, or normalises


class U32Layout:
    """Assigns each destination its place in the two-level hash (pure bookkeeping).

    Nodes in use are indexed per (table, bucket): placing a destination costs
    the same whatever the tree already holds (a scan of every slot made
    setting up N destinations quadratic, and a run of N instances cubic)."""

    def __init__(self) -> None:
        self.slots: dict[str, U32Slot] = {}
        self._nodes: dict[tuple[int, int], set[int]] = {}

    def place(self, dst_ip: str) -> U32Slot:
        if dst_ip in self.slots:
            return self.slots[dst_ip]
        octets = _packed(dst_ip)
        htid = U32_LEVEL2_HTID_BASE + octets[2]
        used = self._nodes.setdefault((htid, octets[3]), set())
        node = next(n for n in range(1, U32_MAX_NODE + 2) if n not in used)
        if node > U32_MAX_NODE:
            raise CollapsarError(
                f"destination {dst_ip}: more than {U32_MAX_NODE} destinations share "
                f"the last two octets .{octets[2]}.{octets[3]}"
            )
        used.add(node)
        slot = U32Slot(octets[2], htid, octets[3], node)
        self.slots[dst_ip] = slot
        return slot

    def level2_tables(self) -> set[int]:
        return {s.level2_htid for s in self.slots.values()}


class MinorAllocator:
    """Class minors for destinations: the lowest free one, so handles stay small.

    Freed minors wait in a heap; above them, `_next` is the lowest never
    handed out.  Both make `take` O(log n) instead of a scan from the bottom."""

    def __init__(self, last: int = LAST_DEST_MINOR) -> None:
        """`last`: the highest minor to hand out (traffic classes keep the
        minors above for their child classes: collapsar.tcal.classes)."""
        self.used: set[int] = set()
        self._freed: list[int] = []
        self._next = FIRST_DEST_MINOR
        self.last = last

    def claim(self, minor: int) -> None:
        """Mark a minor chosen elsewhere (a plan's) as used."""
        self.used.add(minor)

    def take(self) -> int:
        while self._freed and self._freed[0] in self.used:  # freed, then claimed again
            heapq.heappop(self._freed)
        while self._next in self.used:
            self._next += 1
        if self._freed and self._freed[0] < self._next:
            minor = heapq.heappop(self._freed)
            self.used.add(minor)
            return minor
        if self._next > self.last:
            raise CollapsarError(f"more than {self.last - FIRST_DEST_MINOR + 1} destinations on one interface")
        self.used.add(self._next)
        return self._next

    def free(self, minor: int) -> None:
        if minor in self.used:
            self.used.discard(minor)
            heapq.heappush(self._freed, minor)
