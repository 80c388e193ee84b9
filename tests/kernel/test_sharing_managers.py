"""Several managers on one machine, each owning a subset of one experiment's
instances, each with its own Aeron media driver inside its own network
namespace, talking aeron:udp over a bridge this test makes: the shares they
reach equal those of one manager that owns every instance.  Then one
manager's media driver is killed: it reports it, restarts it, and the
managers agree again.  Traffic is synthetic (share_peer.py): what is under
test is the distributed algorithm and its transport."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from share_peer import PeerNetwork

pytestmark = pytest.mark.timing  # managers converge within a few periods

SHARE_PEER = Path(__file__).resolve().parent.parent / "share_peer.py"
M = 1_000_000
TOPOLOGY = """\
experiment: {name: dumbbell-managers, congestion-control: reno}
services:
  a: {command: [x]}
  b: {command: [x]}
  c: {command: [x]}
  d: {command: [x]}
  ra: {command: [x]}
  rb: {command: [x]}
  rc: {command: [x]}
  rd: {command: [x]}
bridges: [left, right]
links:
  - {from: a, to: left, latency: 1ms, bandwidth: 100Mbps}
  - {from: b, to: left, latency: 5ms, bandwidth: 100Mbps}
  - {from: c, to: left, latency: 1ms, bandwidth: 3Mbps}
  - {from: d, to: left, latency: 10ms, bandwidth: 100Mbps}
  - {from: right, to: ra, latency: 1ms, bandwidth: 100Mbps}
  - {from: right, to: rb, latency: 1ms, bandwidth: 100Mbps}
  - {from: right, to: rc, latency: 1ms, bandwidth: 100Mbps}
  - {from: right, to: rd, latency: 1ms, bandwidth: 100Mbps}
  - {from: left, to: right, latency: 2ms, bandwidth: 30Mbps}
"""
WANTS = ["a:ra=80Mbps", "b:rb=80Mbps", "c:rc=80Mbps", "d:rd=80Mbps"]
SPLITS = {2: ["a,b,ra,rb", "c,d,rc,rd"], 3: ["a,ra", "b,c,rb,rc", "d,rd"]}


@pytest.fixture
def hub():
    """n manager namespaces on one bridge; deleted by name afterwards."""
    made = []

    def build(n):
        made.append(PeerNetwork(f"cxsm{os.getpid() % 10000}", n))
        return made[-1]

    yield build
    for network in made:
        network.close()


def peer_argv(file, own, *extra):
    return [
        sys.executable,
        str(SHARE_PEER),
        str(file),
        "--own",
        own,
        *[arg for want in WANTS for arg in ("--wants", want)],
        *extra,
    ]


def one_manager(file):
    """The reference: one manager owns every instance, no transport."""
    out = subprocess.run(
        peer_argv(file, "a,b,c,d,ra,rb,rc,rd", "--duration", "1"),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout.splitlines()[-1])["rates"]


class Managers:
    """n share_peer processes, stopped together: each runs `duration` seconds
    from the moment every one of them has its Aeron up, then all get SIGTERM
    at once and print their final rates (see share_peer's module doc: one
    that ends first is expired by the others, which changes their shares)."""

    def __init__(self, file, network, owns, duration):
        self.duration = duration
        self.procs = []
        for i, own in enumerate(owns):
            argv = network.argv(i, peer_argv(file, own, "--duration", "300"), f"/dev/shm/cx-share-{os.getpid()}-{i}")
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        self.first_lines = [json.loads(proc.stdout.readline() or "null") for proc in self.procs]
        self.started = time.monotonic()

    def finish(self, timeout_s=60):
        time.sleep(max(0.0, self.started + self.duration - time.monotonic()))
        for proc in self.procs:
            proc.terminate()
        results = []
        for proc, first in zip(self.procs, self.first_lines):
            out, err = proc.communicate(timeout=timeout_s)
            assert proc.returncode == 0 and first is not None, err[-2000:]
            results.append([first] + [json.loads(line) for line in out.splitlines()])
        return results

    def kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def experiment_file(tmp_path):
    path = tmp_path / "dumbbell-managers.yaml"
    path.write_text(TOPOLOGY)
    return path


def merged(results):
    rates = {}
    for lines in results:
        rates.update(lines[-1]["rates"])
    return rates


@pytest.mark.parametrize("n", [2, 3])
def test_managers_agree_with_one_manager(n, hub, experiment_file):
    expected = one_manager(experiment_file)
    # c is held by its 3 Mbit/s access link; a, b, d split the other 27 by
    # RTT^-0.55, Reno's measured weight (RTTs 8, 16 and 26 ms: 2 x the
    # one-way latency of their paths).
    w = {"a": 8**-0.55, "b": 16**-0.55, "d": 26**-0.55}
    assert expected["c:rc"] == 3 * M
    for name, weight in w.items():
        assert expected[f"{name}:r{name}"] == pytest.approx(27 * M * weight / sum(w.values()), abs=2)
    managers = Managers(experiment_file, hub(n), SPLITS[n], duration=3)
    try:
        results = managers.finish()
    finally:
        managers.kill()
    assert merged(results) == pytest.approx(expected, rel=0.01)
    for lines in results:
        meta = lines[-1]["status"]["metadata"]
        assert meta["accepted_messages"] > 0 and meta["peers_heard"] >= 1
        assert {k: v for k, v in meta["dropped_messages"].items() if k != "own"} == {}


def test_killed_media_driver_is_reported_restarted_and_sharing_resumes(hub, experiment_file):
    expected = one_manager(experiment_file)
    managers = Managers(experiment_file, hub(2), SPLITS[2], duration=6)
    try:
        first = managers.first_lines[0]
        time.sleep(2.0)  # converged by now
        os.kill(first["driver_pid"], signal.SIGKILL)
        results = managers.finish()
    finally:
        managers.kill()
    lost = [line["driver_lost"] for line in results[0] if "driver_lost" in line]
    assert len(lost) == 1 and f"pid {first['driver_pid']} exited" in lost[0], lost
    status = results[0][-1]["status"]
    assert status["driver_restarts"] == 1 and status["driver_pid"] != first["driver_pid"]
    # The other manager kept hearing the restarted one: shares are right again.
    assert merged(results) == pytest.approx(expected, rel=0.01)
    assert results[1][-1]["status"]["metadata"]["peers_heard"] == 4
