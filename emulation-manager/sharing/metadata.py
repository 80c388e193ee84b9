"""The flow-metadata message the emulation managers exchange over Aeron.

Wire format, version 3, big-endian: a 20-byte header, one record per flow,
then a 16-byte authentication tag:

    offset size field
    0      2    magic          b"CX"
    2      1    version        3
    3      1    flags          bit 0: link ids take 2 bytes (topology > 255 links);
                               other bits reserved, must be 0
    4      4    experiment     tag of the collapsed topology (foreign runs differ)
    8      2    sender_id      the emulation core (instance) that sends
    10     4    epoch          random per sender session (a manager's start, a takeover)
    14     4    sequence       per sender and epoch, +1 per message, wraps
    18     2    flow_count
    20     ...  flow records:  rate u32 (kbit/s), path u8, link ids
                               path: bit 7 saturated, bits 0-6 n_links (1..127)
    end-16 16   auth tag       HMAC-SHA256 over every byte before it, first 16 bytes

A flow is named by the links its path crosses (the receiver knows their delays,
so it derives the RTT itself); rates travel in kbit/s so a record is 5 bytes
plus one (or two) per link, as in Kollaps.  `saturated` says the flow uses
(nearly) all the rate it is allowed, so it would take more: every manager
must feed the model the same demands to reach the same shares, and only the
sender can tell a flow held back by its shaper from one that sends less than
it may.

Authentication (version 3, see the README's trust model): the tag is keyed by
a per-run key that only the run's managers hold, so a message from anything
else on the network is dropped as `forged` before a single record is read.
Replays: within an epoch a sender's sequence only goes forward, and an epoch
once replaced by a newer one is never accepted again, so a captured message
is worth nothing to a receiver that heard its sender since.  The epoch (not a
jump in the sequence) is what tells a restarted or moved sender from a late
message; it costs 4 bytes and the tag 16: 20 bytes a message over version 2.

Decoding is strict: any length, magic, version or experiment tag that does
not add up is rejected without computing the tag; after the tag verifies,
any flag, sender id (an instance of the run), flow count (at most one flow
per other instance) or link id that does not add up is rejected too, and the
`Inbox` drops and counts it rather than letting it reach the model.

Send policy: a sender sends when its set of flows changes or a rate moves by
more than `change_ratio` (10%: the accuracy the sharing must reach, and above
the few-percent wobble of a 50 ms throughput sample), and otherwise a heartbeat
every `heartbeat_periods` (4, i.e. 200 ms); receivers expire a sender's flows
after `expiry_periods` (12) silent periods, three missed heartbeats.  A flow
that stops changes the set, so it is announced at once, not left to expire.
"""

from __future__ import annotations

import hmac
import struct
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from collapsar.errors import CollapsarError

MAGIC = b"CX"
VERSION = 3
FLAG_WIDE_LINK_IDS = 0x01
HEADER = struct.Struct(">2sBBIHIIH")
PREFIX = struct.Struct(">2sBBI")  # what is checked before the tag: is this message for us at all
RECORD = struct.Struct(">IB")
TAG_BYTES = 16  # half of HMAC-SHA256: forging still takes 2^128 tries
SATURATED_BIT = 0x80
MAX_PATH_LINKS = 0x7F
NARROW_LINK_LIMIT = 255  # at most this many links: one byte per link id
MAX_RATE_KBPS = 0xFFFF_FFFF
SEQUENCE_MOD = 1 << 32
MIN_KEY_BYTES = 16
# Sessions of one sender a receiver remembers as over (a restart or takeover
# each): their messages are replays.  Older ones are forgotten, memory stays flat.
RETIRED_EPOCHS = 16
_KEY_CONTEXT = b"collapsar flow metadata v3"


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
    epoch: int = 0


class Codec:
    """Encodes and authenticates, verifies and decodes the messages of one run:
    its experiment tag, link count, instance count and key."""

    def __init__(self, experiment_tag: int, link_count: int, *, instances: int, key: bytes):
        if not 0 <= experiment_tag < 1 << 32:
            raise MetadataError(f"experiment_tag must fit in 32 bits, got {experiment_tag}")
        if not 0 < link_count <= 0xFFFF:
            raise MetadataError(f"link_count must be 1..65535, got {link_count}")
        if not 0 < instances <= 0x10000:
            raise MetadataError(f"instances must be 1..65536, got {instances}")
        if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
            raise MetadataError(f"the metadata key must be at least {MIN_KEY_BYTES} bytes")
        self.experiment_tag = experiment_tag
        self.link_count = link_count
        self.instances = instances
        self.max_flows = max(1, instances - 1)  # one per other instance
        self.wide = link_count > NARROW_LINK_LIMIT
        self.id_size = 2 if self.wide else 1
        # The run key may serve other purposes one day: derive this one's own.
        self._mac_key = hmac.digest(key, _KEY_CONTEXT, "sha256")

    def encoded_size(self, flows: Iterable[FlowReport]) -> int:
        return HEADER.size + sum(RECORD.size + self.id_size * len(f.link_ids) for f in flows) + TAG_BYTES

    def _tag(self, body: bytes | memoryview) -> bytes:
        return hmac.digest(self._mac_key, body, "sha256")[:TAG_BYTES]

    def encode(self, message: Message) -> bytes:
        if not 0 <= message.sender_id < self.instances:
            raise MetadataError(f"sender_id must be 0..{self.instances - 1}, got {message.sender_id}")
        if len(message.flows) > self.max_flows:
            raise MetadataError(f"at most {self.max_flows} flows per message, got {len(message.flows)}")
        if not 0 <= message.epoch < 1 << 32:
            raise MetadataError(f"epoch must fit in 32 bits, got {message.epoch}")
        flags = FLAG_WIDE_LINK_IDS if self.wide else 0
        parts = [
            HEADER.pack(
                MAGIC,
                VERSION,
                flags,
                self.experiment_tag,
                message.sender_id,
                message.epoch,
                message.sequence % SEQUENCE_MOD,
                len(message.flows),
            )
        ]
        for flow in message.flows:
            parts.append(self._encode_flow(flow))
        body = b"".join(parts)
        return body + self._tag(body)

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
        if len(data) < PREFIX.size:
            raise MalformedMessage("short", f"{len(data)} bytes, a header needs {HEADER.size}")
        magic, version, flags, tag = PREFIX.unpack_from(data)
        if magic != MAGIC:
            raise MalformedMessage("foreign", f"magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise MalformedMessage("version", f"version {version}, this manager speaks {VERSION}")
        if tag != self.experiment_tag:
            raise MalformedMessage("foreign", f"experiment tag {tag:#010x}, expected {self.experiment_tag:#010x}")
        if len(data) < HEADER.size + TAG_BYTES:
            raise MalformedMessage("short", f"{len(data)} bytes, header and tag need {HEADER.size + TAG_BYTES}")
        body = memoryview(data)[:-TAG_BYTES]
        if not hmac.compare_digest(self._tag(body), data[-TAG_BYTES:]):
            raise MalformedMessage("forged", "the authentication tag does not match this run's key")
        # Authentic from here on: what is wrong now is a manager's bug, not noise.
        _, _, _, _, sender, epoch, sequence, count = HEADER.unpack_from(data)
        if flags & ~FLAG_WIDE_LINK_IDS:
            raise MalformedMessage("flags", f"reserved flag bits set: {flags:#04x}")
        if bool(flags & FLAG_WIDE_LINK_IDS) != self.wide:
            raise MalformedMessage("flags", f"link id width flag {flags & 1} for a topology of {self.link_count} links")
        if sender >= self.instances:
            raise MalformedMessage("sender", f"sender id {sender}: the run has {self.instances} instances")
        if count > self.max_flows:
            raise MalformedMessage("flows", f"{count} flows, at most {self.max_flows} (one per other instance)")
        flows = self._decode_flows(data, count)
        return Message(sender, sequence, flows, epoch)

    def _decode_flows(self, data: bytes, count: int) -> tuple[FlowReport, ...]:
        end_of_records = len(data) - TAG_BYTES
        flows = []
        offset = HEADER.size
        for index in range(count):
            if offset + RECORD.size > end_of_records:
                raise MalformedMessage("truncated", f"flow {index} of {count} starts past the end ({len(data)} bytes)")
            rate_kbps, path = RECORD.unpack_from(data, offset)
            offset += RECORD.size
            n_links = path & MAX_PATH_LINKS
            if n_links == 0:
                raise MalformedMessage("empty-path", f"flow {index} crosses no link")
            end = offset + n_links * self.id_size
            if end > end_of_records:
                raise MalformedMessage(
                    "truncated", f"flow {index} needs {end} bytes before the tag, message has {end_of_records}"
                )
            link_ids = struct.unpack_from(f">{n_links}{'H' if self.wide else 'B'}", data, offset)
            offset = end
            if max(link_ids) >= self.link_count:
                raise MalformedMessage("link-id", f"flow {index}: link id {max(link_ids)} >= {self.link_count}")
            if len(set(link_ids)) != n_links:  # a path never crosses a link twice
                raise MalformedMessage("repeated-link", f"flow {index}: link ids {link_ids} repeat")
            flows.append(FlowReport(link_ids, rate_kbps * 1000, bool(path & SATURATED_BIT)))
        if offset != end_of_records:
            raise MalformedMessage("trailing", f"{end_of_records - offset} bytes after {count} flows")
        return tuple(flows)


def is_newer(sequence: int, last: int) -> bool:
    """Serial-number order (RFC 1982) on 32 bits: ahead by less than half the space."""
    return 0 < (sequence - last) % SEQUENCE_MOD < SEQUENCE_MOD // 2


class _Session:
    __slots__ = ("epoch", "sequence", "retired")

    def __init__(self, epoch: int, sequence: int):
        self.epoch, self.sequence = epoch, sequence
        self.retired: deque[int] = deque(maxlen=RETIRED_EPOCHS)


class Inbox:
    """Verifies and decodes what arrives; drops and counts what does not
    verify or decode, what comes from ourselves, and what is not newer than
    what its sender said last (a duplicate, a late copy or a replay)."""

    def __init__(self, codec: Codec, own_sender_ids: Iterable[int] = ()):
        self.codec = codec
        self.own = frozenset(own_sender_ids)
        self.dropped: Counter[str] = Counter()
        self.accepted = 0
        self._sessions: dict[int, _Session] = {}

    def accept(self, data: bytes | bytearray | memoryview) -> Message | None:
        try:
            message = self.codec.decode(data)
        except MalformedMessage as error:
            self.dropped[error.reason] += 1
            return None
        if message.sender_id in self.own:
            self.dropped["own"] += 1
            return None
        if not self._fresh(message):
            self.dropped["stale"] += 1
            return None
        self.accepted += 1
        return message

    def _fresh(self, message: Message) -> bool:
        session = self._sessions.get(message.sender_id)
        if session is None:
            self._sessions[message.sender_id] = _Session(message.epoch, message.sequence)
            return True
        if message.epoch == session.epoch:
            if not is_newer(message.sequence, session.sequence):
                return False
        elif message.epoch in session.retired:
            return False  # a session that a newer one replaced: a replay, or a straggler
        else:  # the sender restarted, or another manager took it over
            session.retired.append(session.epoch)
            session.epoch = message.epoch
        session.sequence = message.sequence
        return True


class SendPolicy:
    """Send on change plus a periodic heartbeat (see the module doc)."""

    def __init__(self, heartbeat_periods: int = 4, change_ratio: float = 0.10):
        if heartbeat_periods < 1:
            raise MetadataError(f"heartbeat_periods must be at least 1, got {heartbeat_periods}")
        if not 0 <= change_ratio < 1:
            raise MetadataError(f"change_ratio must lie in [0, 1), got {change_ratio}")
        self.heartbeat_periods = heartbeat_periods
        self.change_ratio = change_ratio
        self._sent: dict[Hashable, int] | None = None
        self._sent_period = 0

    def should_send(self, rates_bps: Mapping[Hashable, int], period: int) -> bool:
        """True when this period's flows (a flow's key, e.g. its link ids -> rate) must go out; the
        caller sends them then, and the policy records them as sent."""
        send = self._sent is None or period - self._sent_period >= self.heartbeat_periods or self._changed(rates_bps)
        if send:
            self._sent = dict(rates_bps)
            self._sent_period = period
        return send

    def _changed(self, rates_bps: Mapping[Hashable, int]) -> bool:
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
