"""A forger on the managers' network (run by test_sharing_forger.py inside a
namespace of the same bridge): it knows the experiment file, so the
experiment tag, the sender ids and every link id, and the managers' channel
and stream; it does not know the run's key.  It uses the real Aeron client
and a media driver of its own, as anything on an experiment overlay could.

    python metadata_forger.py FILE --listen IP:PORT --target IP:PORT ... --aeron-dir DIR

The managers list it among their peers (as a host on the overlay would be
found), so it hears their genuine messages.  Then, to each target:
1. forged messages (version 3, the right experiment tag, a guessed key) in
   which every instance claims a saturated 1 Gbit/s flow to every other one;
2. version 2 messages (no tag) that say the same: what managers accepted
   before the key;
3. every genuine message it captured at least 0.5 s earlier, replayed;
4. a flood of forged messages for --flood seconds, as fast as Aeron takes them.
Prints one JSON line: per target, how many of each Aeron accepted (sent, and
delivered reliably), and the sender ids of the replayed messages.
"""

from __future__ import annotations

import argparse
import json
import secrets
import struct
import sys
import time

from collapsar.manager.experiment import all_instances
from collapsar.manager.sharing.aeron import Client, udp_channel
from collapsar.manager.sharing.bus import STREAM_ID
from collapsar.manager.sharing.driver import MediaDriver
from collapsar.manager.sharing.local import experiment_tag, link_count
from collapsar.manager.sharing.metadata import Codec, FlowReport, Message
from collapsar.parser import parse_file
from collapsar.timeline import build_timeline

GBIT = 1_000_000_000


def greedy_claims(state, instances):
    """sender id -> flows: a saturated gigabit to every other instance."""
    claims = {}
    for sender, src in enumerate(instances):
        paths = [state.path(src, dst) for dst in instances if dst != src]
        claims[sender] = tuple(FlowReport(p.link_ids, GBIT, saturated=True) for p in paths if p is not None)
    return claims


def version_2(tag, sender, sequence, flows):
    """The wire format before authentication (16-byte header, no tag)."""
    body = struct.pack(">2sBBIHIH", b"CX", 2, 0, tag, sender, sequence, len(flows))
    for flow in flows:
        body += struct.pack(
            f">IB{len(flow.link_ids)}B", flow.rate_bps // 1000, len(flow.link_ids) | 0x80, *flow.link_ids
        )
    return body


class Forger:
    def __init__(self, client, listen, targets):
        self.client = client
        self.heard = client.add_subscription(udp_channel(listen), STREAM_ID)
        self.out = {t: client.add_publication(udp_channel(t), STREAM_ID) for t in targets}
        self.captured: list[tuple[float, bytes]] = []
        self.taken = {t: {"forged": 0, "version": 0, "replayed": 0, "flood": 0} for t in targets}

    def pump(self):
        self.client.do_work()
        now = time.monotonic()
        self.captured += [(now, data) for data in self.heard.poll()]

    def wait(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump()
            time.sleep(0.002)

    def send(self, target, payload, kind, timeout_s=10.0):
        deadline = time.monotonic() + timeout_s
        while not self.out[target].offer(payload):
            if time.monotonic() > deadline:
                raise SystemExit(f"forger: {target} took nothing for {timeout_s} s")
            self.pump()
            time.sleep(0.0005)
        self.taken[target][kind] += 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--target", action="append", required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--forged", type=int, default=200)
    parser.add_argument("--flood", type=float, default=2.0)
    args = parser.parse_args()

    experiment = parse_file(args.file)
    timeline = build_timeline(experiment)
    instances = all_instances(timeline)
    state = timeline.steps[0].state
    tag = experiment_tag(experiment.source)
    guess = Codec(tag, link_count(state), instances=len(instances), key=secrets.token_bytes(32))
    claims = greedy_claims(state, instances)

    driver = MediaDriver(args.aeron_dir)
    driver.start()
    client = Client(driver.aeron_dir, name="forger")
    try:
        forger = Forger(client, args.listen, args.target)
        deadline = time.monotonic() + 20
        while not all(p.is_connected() for p in forger.out.values()):
            if time.monotonic() > deadline:
                raise SystemExit("forger: the managers' subscriptions never connected")
            forger.pump()
            time.sleep(0.01)
        print(json.dumps({"ready": True}), flush=True)
        forger.wait(1.5)  # hear genuine messages meanwhile
        for target in args.target:
            for n in range(args.forged):
                sender = n % len(instances)
                forger.send(target, guess.encode(Message(sender, 1_000_000 + n, claims[sender], epoch=n)), "forged")
            for n in range(50):
                sender = n % len(instances)
                forger.send(target, version_2(tag, sender, 2_000_000 + n, claims[sender][:3]), "version")
        forger.wait(0.5)
        cutoff = time.monotonic() - 0.5
        replays = [data for heard_at, data in forger.captured if heard_at < cutoff]
        for target in args.target:
            for data in replays:
                forger.send(target, data, "replayed")
        flood = [guess.encode(Message(n % len(instances), n, claims[n % len(instances)])) for n in range(512)]
        end = time.monotonic() + args.flood
        n = 0
        while time.monotonic() < end:
            taken = 0
            for target in args.target:
                if forger.out[target].offer(flood[n % len(flood)]):
                    forger.taken[target]["flood"] += 1
                    taken += 1
            n += 1
            if n % 64 == 0 or not taken:
                forger.pump()
            if not taken:  # back-pressured: the managers read no faster; leave them the CPU
                time.sleep(0.0002)
        forger.wait(1.5)  # what Aeron took gets delivered before the driver stops
        print(
            json.dumps(
                {
                    "taken": forger.taken,
                    "replayed_senders": [struct.unpack_from(">H", d, 8)[0] for d in replays],
                    "flood_message_bytes": len(flood[0]),
                }
            ),
            flush=True,
        )
    finally:
        client.close()
        driver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
