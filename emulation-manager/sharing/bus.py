"""What one manager says and hears about flows: the metadata bus.

Each emulation core this manager owns is a sender (sender id = the
instance's index in the run's instance order, which every manager derives
from the same experiment file), with an epoch of its own (random, new when
the manager starts or takes the core over) and a sequence.  Per core,
`SendPolicy` decides when its flows go out (on change, else a heartbeat).
What arrives is verified and decoded by one `Inbox` (forged, malformed,
foreign, own and stale messages are dropped and counted); of what a sender
said within one period only the newest counts (the others are counted as
superseded), so a sender that floods costs the loop one check of its flows
per period; those flows must be its instance's paths (`Routes`), else the
message is dropped as well; and `PeerFlows` keeps them, forgetting senders
silent for `expiry_periods`.

The transport is anything with `offer(bytes) -> int` and `poll() ->
list[bytes]`: `transport.Transport` in a run (see `open_aeron`), a list in unit
tests.  Channels: `aeron:ipc` reaches the other managers that share this
host's media driver, one `aeron:udp` publication per peer manager reaches
the others, and one UDP subscription on `listen` hears them.  The metadata
travels between hosts or on the host's loopback, never through an emulated
(shaped) path.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Protocol

from collapsar.manager.sharing.metadata import SEQUENCE_MOD, Codec, FlowReport, Inbox, Message, PeerFlows, SendPolicy
from collapsar.manager.sharing.routes import Routes

STREAM_ID = 1006  # issue 6
METADATA_PORT = 40106  # UDP, between hosts' managers


class Wire(Protocol):
    def offer(self, payload: bytes) -> int: ...
    def poll(self) -> list[bytes]: ...


@dataclass
class BusCounters:
    sent_messages: int = 0
    sent_bytes: int = 0
    unsent_messages: int = 0  # offered while no subscriber was connected
    expired_senders: int = 0
    received_bytes: int = 0
    accepted_messages: int = 0  # verified, fresh, and its flows are its sender's paths
    superseded_messages: int = 0  # a newer one from the same sender came in the same period
    dropped: Counter = field(default_factory=Counter)


class MetadataBus:
    def __init__(
        self,
        codec: Codec,
        sender_ids: Mapping[str, int],
        wire: Wire | None,
        *,
        routes: Routes,
        heartbeat_periods: int = 4,
        change_ratio: float = 0.10,
        expiry_periods: int = 12,
    ):
        self.codec = codec
        self.sender_ids = dict(sender_ids)
        self.wire = wire
        self.routes = routes
        self.inbox = Inbox(codec, own_sender_ids=self.sender_ids.values())
        self.peers = PeerFlows(expiry_periods)
        self.counters = BusCounters(dropped=self.inbox.dropped)
        self._heartbeat_periods, self._change_ratio = heartbeat_periods, change_ratio
        self._policy = {name: SendPolicy(heartbeat_periods, change_ratio) for name in self.sender_ids}
        self._sequence = dict.fromkeys(self.sender_ids, 0)
        self._epoch = {name: secrets.randbelow(1 << 32) for name in self.sender_ids}

    def own(self, sender_ids: Mapping[str, int]) -> None:
        """The cores this manager owns from now on (container mode: containers
        come, go and move between nodes).  A core given up announces that it
        has no flow left, so its flows do not wait out the expiry elsewhere.
        A core taken over starts an epoch of its own: receivers take it for
        a new session of that sender, and from then on refuse the old one's."""
        for name in [n for n in self.sender_ids if n not in sender_ids]:
            if self.wire is not None:
                self._send(self._next(name, ()))
            del self._policy[name], self._sequence[name], self._epoch[name]
        for name in sender_ids:
            if name not in self.sender_ids:
                self.peers.forget(sender_ids[name])  # what its old owner said: ours to say now
                self._policy[name] = SendPolicy(self._heartbeat_periods, self._change_ratio)
                self._sequence[name] = 0
                self._epoch[name] = secrets.randbelow(1 << 32)
        self.sender_ids = dict(sender_ids)
        self.inbox.own = frozenset(self.sender_ids.values())

    def _next(self, name: str, reports: tuple[FlowReport, ...]) -> Message:
        self._sequence[name] += 1
        return Message(self.sender_ids[name], self._sequence[name] % SEQUENCE_MOD, reports, self._epoch[name])

    def _send(self, message: Message) -> None:
        payload = self.codec.encode(message)
        assert self.wire is not None  # publish() sends nothing without a wire
        taken = self.wire.offer(payload)
        self.counters.sent_messages += 1
        self.counters.sent_bytes += len(payload)
        if not taken:
            self.counters.unsent_messages += 1

    def publish(self, period: int, flows_by_core: Mapping[str, Iterable[FlowReport]]) -> None:
        """Send each owned core's flows if its policy says so (a core with no
        active flow sends an empty list: that is how a stop is announced)."""
        if self.wire is None:
            return
        for name in self.sender_ids:
            reports = tuple(flows_by_core.get(name, ()))
            # The saturated bit is part of what the others compute with: a flip is a change.
            key: dict[Hashable, int] = {(f.link_ids, f.saturated): f.rate_bps for f in reports}
            if not self._policy[name].should_send(key, period):
                continue
            self._send(self._next(name, reports))

    def receive(self, period: int, state) -> dict[int, tuple[FlowReport, ...]]:
        """Take in what arrived, checking flows against `state` (the
        timeline's state now); sender id -> its latest flows (expired ones gone)."""
        if self.wire is not None:
            newest: dict[int, Message] = {}
            for data in self.wire.poll():
                self.counters.received_bytes += len(data)
                message = self.inbox.accept(data)
                if message is None:
                    continue
                if message.sender_id in newest:
                    self.counters.superseded_messages += 1
                newest[message.sender_id] = message
            for message in newest.values():
                reason = self.routes.check(message, state)
                if reason is not None:
                    self.counters.dropped[reason] += 1
                    continue
                self.counters.accepted_messages += 1
                self.peers.update(message, period)
        self.counters.expired_senders += len(self.peers.expire(period))
        return self.peers.flows()

    def status(self) -> dict:
        c = self.counters
        return {
            "sent_messages": c.sent_messages,
            "sent_bytes": c.sent_bytes,
            "unsent_messages": c.unsent_messages,
            "received_bytes": c.received_bytes,
            "accepted_messages": c.accepted_messages,
            "superseded_messages": c.superseded_messages,
            "dropped_messages": dict(c.dropped),
            "expired_senders": c.expired_senders,
            "peers_heard": len(self.peers.flows()),
        }


def open_aeron(
    aeron_dir: str | FsPath,
    *,
    listen: str | None,
    peers: Iterable[str],
    prefix: tuple[str, ...] = (),
    log_path: str | FsPath | None = None,
    on_driver_lost: Callable[[str], None] | None = None,
    driver_timeout_ms: int | None = None,
):
    """Start this manager's media driver and the channels of the bus; returns
    the `transport.Transport` (restarts a lost driver and re-adds the channels)."""
    from collapsar.manager.sharing.aeron import DRIVER_TIMEOUT_MS, ipc_channel, udp_channel
    from collapsar.manager.sharing.driver import MediaDriver
    from collapsar.manager.sharing.transport import Transport

    transport = Transport(
        MediaDriver(aeron_dir, prefix=prefix, log_path=log_path),
        on_driver_lost=on_driver_lost,
        driver_timeout_ms=driver_timeout_ms or DRIVER_TIMEOUT_MS,
    )
    transport.start()
    try:
        transport.add("publication", ipc_channel(), STREAM_ID)
        transport.add("subscription", ipc_channel(), STREAM_ID)
        for peer in peers:
            transport.add("publication", udp_channel(peer), STREAM_ID)
        if listen:
            transport.add("subscription", udp_channel(listen), STREAM_ID)
    except Exception:
        transport.close()
        raise
    return transport
