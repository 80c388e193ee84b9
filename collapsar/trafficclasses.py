"""A service's `traffic-classes:`: its instances' traffic sorted by DSCP,
protocol or port into classes served by strict priority, and by weight
among classes of one priority, as a cloud's or a switch's priority queues
serve them (traffic-shaping-icpe23 in the papers: strict queues, and the
weighted round robin of its experiments).

Where the classes act: wherever the instance's traffic waits.  Each
destination's path has its own queue (its class in the TCAL's tree), and
with classes that queue is one per class: a packet of a higher class leaves
before any waiting packet of a lower one, and classes of one priority take
turns in proportion to their weights.  Behind the instance's egress token
bucket (collapsar.egress) the priorities hold across all destinations: the
bucket takes the highest-priority packet any path has ready.  Traffic to
different destinations never shares a path's queue, so without a bucket a
bulk flow to one destination does not delay another destination at all.

Classification, per packet: the first class (in the order written) one of
whose `match` entries fits the packet; an entry fits when every field it
names does.  Traffic no entry fits goes to the class without a `match`
(at most one), or, without one, to an implicit class `default` at the
lowest priority written (the largest number), weight 1.  Ports are read
from TCP and UDP headers of unfragmented IPv4 packets (or first fragments)
without IP options; other packets never match a port (they go by DSCP and
protocol alone).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CLASSES = 8  # htb's priorities are 0..7; eight classes cover any mix
MAX_PRIORITY = 7
MAX_WEIGHT = 100
MAX_MATCHES = 64  # entries per service, all classes together
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17}
PORT_PROTOCOLS = (6, 17)  # a port means TCP's or UDP's
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class Match:
    """One `match` entry: every field given must fit (None: any)."""

    dscp: int | None = None
    protocol: int | None = None  # IP protocol number
    src_port: int | None = None
    dst_port: int | None = None

    def fits(self, dscp: int, protocol: int, src_port: int | None, dst_port: int | None) -> bool:
        """`src_port`/`dst_port` None: the packet has no ports (not TCP/UDP,
        a later fragment, or IP options)."""
        if self.dscp is not None and dscp != self.dscp:
            return False
        if self.protocol is not None and protocol != self.protocol:
            return False
        if self.src_port is not None and (src_port != self.src_port or protocol not in PORT_PROTOCOLS):
            return False
        return self.dst_port is None or (dst_port == self.dst_port and protocol in PORT_PROTOCOLS)

    def describe(self) -> str:
        names = {number: name for name, number in PROTOCOLS.items()}
        parts = []
        if self.dscp is not None:
            parts.append(f"dscp {self.dscp}")
        if self.protocol is not None:
            parts.append(f"protocol {names.get(self.protocol, self.protocol)}")
        if self.src_port is not None:
            parts.append(f"src-port {self.src_port}")
        if self.dst_port is not None:
            parts.append(f"dst-port {self.dst_port}")
        return " ".join(parts)


@dataclass(frozen=True)
class TrafficClass:
    name: str
    priority: int  # 0 is served first
    weight: int = 1  # among classes of the same priority
    matches: tuple[Match, ...] = ()  # empty: the class of unmatched traffic

    def describe(self) -> str:
        what = " or ".join(m.describe() for m in self.matches) if self.matches else "unmatched traffic"
        return f"{self.name}: priority {self.priority}, weight {self.weight}, {what}"


@dataclass(frozen=True)
class TrafficClasses:
    """A service's classes, in the order written, the unmatched traffic's
    class among them (the implicit `default` last if none was written)."""

    classes: tuple[TrafficClass, ...]

    @classmethod
    def of(cls, written: list[TrafficClass]) -> TrafficClasses:
        if not any(not c.matches for c in written):
            lowest = max(c.priority for c in written)
            written = [*written, TrafficClass(DEFAULT_NAME, lowest)]
        return cls(tuple(written))

    @property
    def default_index(self) -> int:
        return next(i for i, c in enumerate(self.classes) if not c.matches)

    def classify(self, dscp: int, protocol: int, src_port: int | None = None, dst_port: int | None = None) -> int:
        """The index of the class a packet with these header fields joins."""
        for index, klass in enumerate(self.classes):
            if any(m.fits(dscp, protocol, src_port, dst_port) for m in klass.matches):
                return index
        return self.default_index

    def describe(self) -> list[str]:
        return [c.describe() for c in self.classes]
