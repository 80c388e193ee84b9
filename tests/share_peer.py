"""One manager of a multi-manager experiment, with synthetic traffic.

    python tests/share_peer.py FILE --own a,ra --wants a:ra=50M \
        --listen 10.0.0.1:40100 --peer 10.0.0.2:40100 --aeron-dir DIR --key-file KEY --duration 4

Each manager owns a subset of the experiment's instances, runs its own media
driver and `ShareLoop`, and talks `aeron:udp` to its peers; this is the
shape the Docker/Swarm mode takes (one manager per node owning that node's
containers, peers given by address, no broadcast).  What is synthetic here
is only the traffic: each owned flow sends min(what it wants, what its class
allows) per period into in-memory counters, and the classes live in a
fake tree of tests/fake_tc.py instead of the kernel.  So several managers on one machine can
be checked to agree with one manager that owns everything (the distributed
algorithm and its transport, not the kernel), and a media driver can be
killed under them.

The managers of one experiment share the key in --key-file (sharing/key.py;
`PeerNetwork` writes one for its members); without it a manager makes its
own and can talk to nobody.

Output: JSON lines on stdout: {"driver_pid": N} once Aeron is up, one
{"driver_lost": ...} per loss, and at the end {"rates": {"a>ra": bps},
"status": ..., "tick_ms": {...}, "cpu_s": ...} (how long the loop's ticks
took, and the CPU time of the loop).  The end is --duration after the loop starts, or SIGTERM,
whichever comes first: managers started together do not get their loops
going together (each starts its own media driver), and one that ends
earlier falls silent, so the others expire its flows.  A harness that
compares their final lines stops them all at once.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fake_tc import FakeTree

from collapsar.manager.core import EmulationCore
from collapsar.manager.experiment import all_instances, paths_from
from collapsar.manager.sharing.bus import METADATA_PORT, MetadataBus, open_aeron
from collapsar.manager.sharing.key import new_key, read_key_file, write_key_file
from collapsar.manager.sharing.local import run_codec
from collapsar.manager.sharing.loop import ShareLoop, ShareSettings
from collapsar.manager.sharing.routes import Routes
from collapsar.parser import parse_file
from collapsar.tcal.plan import Shaping
from collapsar.timeline import build_timeline
from collapsar.units import parse_rate_bps


class SyntheticHost:
    """The owned instances of one experiment on memory trees, and a plant
    that turns each flow's wish into counter bytes every period."""

    def __init__(
        self,
        path: str,
        owned: list[str],
        wants: dict[tuple[str, str], int],
        noise: float = 0.0,
        key: bytes | None = None,
    ):
        experiment = parse_file(path)
        self.timeline = build_timeline(experiment)
        self.instances = all_instances(self.timeline)
        unknown = sorted(set(owned) - set(self.instances))
        if unknown:
            raise SystemExit(f"{path}: no instance {', '.join(unknown)} (has {', '.join(self.instances)})")
        first = self.timeline.steps[0].state
        ips = {name: f"10.255.{i // 250}.{i % 250 + 2}" for i, name in enumerate(self.instances)}
        self.cores = {}
        for name in owned:
            core = EmulationCore(name, "eth0", "-", ips, FakeTree, Shaping, netem=True, wire_overhead=True)
            core.install(paths_from(first, name, self.instances))
            self.cores[name] = core
        self.owned = owned
        self.wants = {k: v for k, v in wants.items() if k[0] in owned}
        self.sent = dict.fromkeys(self.wants, 0)
        self.noise = noise
        self._rng = random.Random(1)
        self.codec = run_codec(experiment.source, self.timeline, self.instances, key or new_key())
        self.routes = Routes(self.timeline, self.instances)
        self.sender_ids = {name: i for i, name in enumerate(self.instances)}

    def rate(self, src: str, dst: str) -> int:
        fields = self.cores[src].effective(dst)
        return 0 if fields is None else fields["rate_bps"]

    def advance(self, period_s: float) -> dict[tuple[str, str], int]:
        for (src, dst), want in self.wants.items():
            wobble = 1 - self.noise * self._rng.random() if self.noise else 1.0  # never above the class rate
            self.sent[(src, dst)] += int(min(want, self.rate(src, dst)) * wobble * period_s / 8)
        return dict(self.sent)


class PeerNetwork:
    """n network namespaces on one bridge (inside a hub namespace), for
    managers that talk aeron:udp on one machine, and their run's key in a
    private directory; `close()` deletes exactly the namespaces made, by
    name, and that directory."""

    def __init__(self, tag: str, n: int, subnet_prefix: str = "10.231.0", port: int = METADATA_PORT):
        self.made: list[str] = []
        self.members: list[tuple[str, str]] = []  # (netns, "ip:port")
        self._key_dir = Path(tempfile.mkdtemp(prefix=f"{tag}-key-"))  # mode 0700
        self.key_path = self._key_dir / "metadata.key"
        try:
            write_key_file(self.key_path)
            hub = f"{tag}h"
            self._ip("netns", "add", hub)
            self.made.append(hub)
            self._ip("-n", hub, "link", "add", "br0", "type", "bridge")
            self._ip("-n", hub, "link", "set", "br0", "up")
            for i in range(n):
                ns = f"{tag}m{i}"
                self._ip("netns", "add", ns)
                self.made.append(ns)
                self._ip("-n", hub, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._ip("-n", hub, "link", "set", f"v{i}", "master", "br0", "up")
                self._ip("-n", ns, "addr", "add", f"{subnet_prefix}.{i + 1}/24", "dev", "eth0")
                self._ip("-n", ns, "link", "set", "eth0", "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
                self.members.append((ns, f"{subnet_prefix}.{i + 1}:{port}"))
        except Exception:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def tx_bytes(self, index: int) -> int:
        ns = self.members[index][0]
        out = subprocess.run(
            ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
            check=True,
            capture_output=True,
            text=True,
        )
        return int(out.stdout)

    def argv(self, index: int, base_argv: list[str], aeron_dir: str) -> list[str]:
        """`ip netns exec` + a share_peer command line that listens on this
        member's address and publishes to every other member."""
        ns, listen = self.members[index]
        peers = [arg for j, (_, addr) in enumerate(self.members) if j != index for arg in ("--peer", addr)]
        return [
            "ip",
            "netns",
            "exec",
            ns,
            *base_argv,
            "--listen",
            listen,
            *peers,
            "--aeron-dir",
            aeron_dir,
            "--key-file",
            str(self.key_path),
        ]

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made.clear()
        shutil.rmtree(self._key_dir, ignore_errors=True)


def _wants(texts: list[str]) -> dict[tuple[str, str], int]:
    wants = {}
    for text in texts:
        pair, _, rate = text.partition("=")
        src, _, dst = pair.partition(":")
        if not (src and dst and rate):
            raise SystemExit(f"--wants {text}: expected SRC:DST=RATE, e.g. a:ra=50Mbps")
        wants[(src, dst)] = parse_rate_bps(rate)
    return wants


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--own", required=True, help="Instances this manager owns, comma-separated")
    parser.add_argument("--wants", action="append", default=[], help="SRC:DST=RATE, what a flow would send")
    parser.add_argument("--listen", default=None, help="ip:port this manager's UDP subscription binds")
    parser.add_argument("--peer", action="append", default=[], help="ip:port of another manager")
    parser.add_argument("--aeron-dir", default=None, help="Media driver dir (omit: no Aeron, alone)")
    parser.add_argument(
        "--key-file", default=None, help="The run's metadata key, shared by its managers (omit: a key of its own)"
    )
    parser.add_argument("--duration", type=float, default=4.0, help="Seconds to run")
    parser.add_argument("--period", type=float, default=0.05, help="Seconds per period")
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="Each period a flow sends up to this fraction less (measurement wobble)",
    )
    args = parser.parse_args(argv)
    # A plain flag, never an Event: a handler that sets an Event can run while
    # this (main) thread holds that Event's lock inside wait(), and deadlock.
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))

    def emit(record: dict) -> None:
        print(json.dumps(record), flush=True)

    key = read_key_file(args.key_file) if args.key_file else None
    host = SyntheticHost(args.file, [n for n in args.own.split(",") if n], _wants(args.wants), args.noise, key)
    transport = None
    if args.aeron_dir:
        transport = open_aeron(
            args.aeron_dir,
            listen=args.listen,
            peers=args.peer,
            on_driver_lost=lambda problem: emit({"driver_lost": problem}),
        )
        emit({"driver_pid": transport.driver.pid})
    bus = MetadataBus(host.codec, {n: host.sender_ids[n] for n in host.owned}, transport, routes=host.routes)
    loop = ShareLoop(host.owned, host.cores, bus, netem=True, settings=ShareSettings(increase_gain=1.0))
    try:
        start = time.monotonic()
        next_tick = start
        ticks_ms: list[float] = []
        cpu_start = time.process_time()
        while time.monotonic() - start < args.duration and not stopping:
            now_us = int((time.monotonic() - start) * 1e6)
            # The plant's bytes follow the nominal period, so the loop's clock
            # does too: a late tick must not read as a slower flow.
            virtual_ns = int((loop.period + 1) * args.period * 1e9)
            began = time.perf_counter()
            loop.tick(virtual_ns, host.advance(args.period), host.timeline.state_at(now_us))
            ticks_ms.append((time.perf_counter() - began) * 1e3)
            next_tick += args.period
            time.sleep(max(0.0, next_tick - time.monotonic()))
        emit(
            {
                "rates": {f"{s}:{d}": host.rate(s, d) for s, d in host.wants},
                "status": {
                    **loop.status(),
                    "driver_restarts": len(transport.failures) if transport else 0,
                    "driver_pid": transport.driver.pid if transport else None,
                },
                "tick_ms": {
                    "median": round(statistics.median(ticks_ms), 3) if ticks_ms else None,
                    "max": round(max(ticks_ms), 3) if ticks_ms else None,
                    "count": len(ticks_ms),
                },
                "cpu_s": round(time.process_time() - cpu_start, 3),
            }
        )
    finally:
        if transport is not None:
            transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
