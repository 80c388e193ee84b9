"""The flow-metadata message the emulation managers exchange over Aeron.

Wire format, version 2, big-endian, 16-byte header then one record per flow:

    offset size field
    0      2    magic          b"CX"
    2      1    version        2
    3      1    flags          bit 0: link ids take 2 bytes (topology > 255 links);
                               other bits reserved, must be 0
    4      4    experiment     tag of the collapsed topology (foreign runs differ)
    8      2    sender_id      the emulation core (instance) that sends
    10     4    sequence       per sender, +1 per message, wraps
    14     2    flow_count
    16     ...  flow records:  rate u32 (kbit/s), path u8, link ids
                               path: bit 7 saturated, bits 0-6 n_links (1..127)

A flow is named by the links its path crosses (the receiver knows their delays,
so it derives the RTT itself); rates travel in kbit/s so a record is 5 bytes
plus one (or two) per link, as in Kollaps.  `saturated` (version 2) says the
flow uses (nearly) all the rate it is allowed, so it would take more: every
manager must feed the model the same demands to reach the same shares, and
only the sender can tell a flow held back by its shaper from one that sends
less than it may.  Decoding is strict: any length,
magic, version, flag, tag or link id that does not add up is rejected, and the
`Inbox` drops and counts it rather than letting it reach the model.

Send policy: a sender sends when its set of flows changes or a rate moves by
more than `change_ratio` (10%: the accuracy the sharing must reach, and above
the few-percent wobble of a 50 ms throughput sample), and otherwise a heartbeat
every `heartbeat_periods` (4, i.e. 200 ms); receivers expire a sender's flows
after `expiry_periods` (12) silent periods, three missed heartbeats.  A flow
that stops changes the set, so it is announced at once, not left to expire.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..errors import CollapsarError

MAGIC = b"CX"
VERSION = 2
FLAG_WIDE_LINK_IDS = 0x01
HEADER = struct.Struct(">2sBBIHIH")
RECORD = struct.Struct(">IB")
SATURATED_BIT = 0x80
MAX_PATH_LINKS = 0x7F
NARROW_LINK_LIMIT = 255  # at most this many links: one byte per link id
MAX_RATE_KBPS = 0xFFFF_FFFF
MAX_FLOWS = 0xFFFF
SEQUENCE_MOD = 1 << 32
# A sequence this far behind the last one seen is a restarted sender, not a late message.
REORDER_WINDOW = 1024


class MetadataError(CollapsarError):
    """A message that cannot be built (a caller's bug: ids or rates out of range)."""


class MalformedMessage(MetadataError):
    """A received message that does not decode; `reason` is its counter key."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(f"metadata message dropped ({reason}): {detail}")


@dataclass(frozen=True)
class FlowReport:
    link_ids: tuple[int, ...]
    rate_bps: int  # measured: what the flow offered over the last window
    saturated: bool = False  # it sends at (nearly) its allowed rate: it wants more


@dataclass(frozen=True)
class Message:
    sender_id: int
    sequence: int
    flows: tuple[FlowReport, ...]


class Codec:
    """Encodes and decodes messages of one experiment (tag + link count)."""

    def __init__(self, experiment_tag: int, link_count: int):
        if not 0 <= experiment_tag < 1 << 32:
            raise MetadataError(f"experiment_tag must fit in 32 bits, got {experiment_tag}")
        if not 0 < link_count <= 0xFFFF:
            raise MetadataError(f"link_count must be 1..65535, got {link_count}")
        self.experiment_tag = experiment_tag
        self.link_count = link_count
        self.wide = link_count > NARROW_LINK_LIMIT
        self.id_size = 2 if self.wide else 1

    def encoded_size(self, flows: Iterable[FlowReport]) -> int:
        return HEADER.size + sum(RECORD.size + self.id_size * len(f.link_ids) for f in flows)

    def encode(self, message: Message) -> bytes:
        if not 0 <= message.sender_id <= 0xFFFF:
            raise MetadataError(f"sender_id must fit in 16 bits, got {message.sender_id}")
        if len(message.flows) > MAX_FLOWS:
            raise MetadataError(f"at most {MAX_FLOWS} flows per message, got {len(message.flows)}")
        flags = FLAG_WIDE_LINK_IDS if self.wide else 0
        parts = [HEADER.pack(MAGIC, VERSION, flags, self.experiment_tag, message.sender_id,
                             message.sequence % SEQUENCE_MOD, len(message.flows))]
        for flow in message.flows:
            parts.append(self._encode_flow(flow))
        return b"".join(parts)

    def _encode_flow(self, flow: FlowReport) -> bytes:
        if not 1 <= len(flow.link_ids) <= MAX_PATH_LINKS:
            raise MetadataError(f"a flow crosses 1..{MAX_PATH_LINKS} links, got {len(flow.link_ids)}")
        for link_id in flow.link_ids:
            if not 0 <= link_id < self.link_count:
                raise MetadataError(f"link id {link_id} outside 0..{self.link_count - 1}")
        if len(set(flow.link_ids)) != len(flow.link_ids):
            raise MetadataError(f"a path crosses each link once, got link ids {flow.link_ids}")
        rate_kbps = (flow.rate_bps + 500) // 1000
        if not 0 <= rate_kbps <= MAX_RATE_KBPS:
            raise MetadataError(f"rate_bps {flow.rate_bps} does not fit in 32 bits of kbit/s")
        ids = struct.pack(f">{len(flow.link_ids)}{'H' if self.wide else 'B'}", *flow.link_ids)
        path = len(flow.link_ids) | (SATURATED_BIT if flow.saturated else 0)
        return RECORD.pack(rate_kbps, path) + ids

    def decode(self, data: bytes | bytearray | memoryview) -> Message:
        data = bytes(data)
        if len(data) < HEADER.size:
            raise MalformedMessage("short", f"{len(data)} bytes, a header needs {HEADER.size}")
        magic, version, flags, tag, sender, sequence, count = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise MalformedMessage("foreign", f"magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise MalformedMessage("version", f"version {version}, this manager speaks {VERSION}")
        if tag != self.experiment_tag:
            raise MalformedMessage("foreign", f"experiment tag {tag:#010x}, expected {self.experiment_tag:#010x}")
        if flags & ~FLAG_WIDE_LINK_IDS:
            raise MalformedMessage("flags", f"reserved flag bits set: {flags:#04x}")
        if bool(flags & FLAG_WIDE_LINK_IDS) != self.wide:
            raise MalformedMessage("flags", f"link id width flag {flags & 1} for a topology of {self.link_count} links")
        flows = []
        offset = HEADER.size
        for index in range(count):
            if offset + RECORD.size > len(data):
                raise MalformedMessage("truncated", f"flow {index} of {count} starts past the end ({len(data)} bytes)")
            rate_kbps, path = RECORD.unpack_from(data, offset)
            offset += RECORD.size
            n_links = path & MAX_PATH_LINKS
            if n_links == 0:
                raise MalformedMessage("empty-path", f"flow {index} crosses no link")
            end = offset + n_links * self.id_size
            if end > len(data):
                raise MalformedMessage("truncated", f"flow {index} needs {end} bytes, message has {len(data)}")
            link_ids = struct.unpack_from(f">{n_links}{'H' if self.wide else 'B'}", data, offset)
            offset = end
            if max(link_ids) >= self.link_count:
                raise MalformedMessage("link-id", f"flow {index}: link id {max(link_ids)} >= {self.link_count}")
            if len(set(link_ids)) != n_links:  # a path never crosses a link twice
                raise MalformedMessage("repeated-link", f"flow {index}: link ids {link_ids} repeat")
            flows.append(FlowReport(link_ids, rate_kbps * 1000, bool(path & SATURATED_BIT)))
        if offset != len(data):
            raise MalformedMessage("trailing", f"{len(data) - offset} bytes after {count} flows")
        return Message(sender, sequence, tuple(flows))


class Inbox:
    """Decodes what arrives, drops and counts what does not decode, what comes
    from ourselves and what is older than the last message of its sender."""

    def __init__(self, codec: Codec, own_sender_ids: Iterable[int] = ()):
        self.codec = codec
        self.own = frozenset(own_sender_ids)
        self.dropped: Counter[str] = Counter()
        self.accepted = 0
        self._last_sequence: dict[int, int] = {}

    def accept(self, data: bytes | bytearray | memoryview) -> Message | None:
        try:
            message = self.codec.decode(data)
        except MalformedMessage as error:
            self.dropped[error.reason] += 1
            return None
        if message.sender_id in self.own:
            self.dropped["own"] += 1
            return None
        last = self._last_sequence.get(message.sender_id)
        if last is not None:
            behind = (last - message.sequence) % SEQUENCE_MOD
            if behind < REORDER_WINDOW:  # includes 0: a duplicate
                self.dropped["stale"] += 1
                return None
        self._last_sequence[message.sender_id] = message.sequence
        self.accepted += 1
        return message


class SendPolicy:
    """Send on change plus a periodic heartbeat (see the module doc)."""

    def __init__(self, heartbeat_periods: int = 4, change_ratio: float = 0.10):
        if heartbeat_periods < 1:
            raise MetadataError(f"heartbeat_periods must be at least 1, got {heartbeat_periods}")
        if not 0 <= change_ratio < 1:
            raise MetadataError(f"change_ratio must lie in [0, 1), got {change_ratio}")
        self.heartbeat_periods = heartbeat_periods
        self.change_ratio = change_ratio
        self._sent: dict[tuple[int, ...], int] | None = None
        self._sent_period = 0

    def should_send(self, rates_bps: Mapping[tuple[int, ...], int], period: int) -> bool:
        """True when this period's flows (link ids -> rate) must go out; the
        caller sends them then, and the policy records them as sent."""
        send = (self._sent is None or period - self._sent_period >= self.heartbeat_periods
                or self._changed(rates_bps))
        if send:
            self._sent = dict(rates_bps)
            self._sent_period = period
        return send

    def _changed(self, rates_bps: Mapping[tuple[int, ...], int]) -> bool:
        assert self._sent is not None
        if rates_bps.keys() != self._sent.keys():
            return True
        for links, rate in rates_bps.items():
            before = self._sent[links]
            if abs(rate - before) > self.change_ratio * max(before, 1):
                return True
        return False


class PeerFlows:
    """The flows last heard from every other sender, expiring silent senders."""

    def __init__(self, expiry_periods: int = 12):
        if expiry_periods < 1:
            raise MetadataError(f"expiry_periods must be at least 1, got {expiry_periods}")
        self.expiry_periods = expiry_periods
        self._by_sender: dict[int, tuple[int, tuple[FlowReport, ...]]] = {}

    def update(self, message: Message, period: int) -> None:
        self._by_sender[message.sender_id] = (period, message.flows)

    def forget(self, sender_id: int) -> None:
        self._by_sender.pop(sender_id, None)

    def expire(self, period: int) -> list[int]:
        """Forget senders silent for `expiry_periods`; returns their ids."""
        gone = [s for s, (heard, _) in self._by_sender.items() if period - heard >= self.expiry_periods]
        for sender in gone:
            del self._by_sender[sender]
        return gone

    def flows(self) -> dict[int, tuple[FlowReport, ...]]:
        return {sender: flows for sender, (_, flows) in self._by_sender.items()}
