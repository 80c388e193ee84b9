"""VM tier: tests that need a stock distro kernel (sch_netem), run inside one VM.

On the host, only `test_vm_tier.py` is collected here: it boots one VM with
Debian's stock kernel and runs `pytest tests/vm` inside it.  Inside that VM
(the runner's marker variable is set AND the kernel differs from the host's),
everything else here is collected and the runner itself is not.

Fixtures for the guest: namespace pairs (shared with tests/kernel through
tests/netns_helpers.py) and `probe`, which measures RTT with ping and
throughput with iperf3 between them.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
from dataclasses import dataclass, field

import pytest
from netns_helpers import NetnsPair, make_netns_pair, sh  # noqa: F401 (a fixture)

from collapsar.vm import HOST_RELEASE_VAR, IN_VM_VAR

RUNNER = "test_vm_tier.py"


def in_vm() -> bool:
    return os.environ.get(IN_VM_VAR) == "1" and platform.release() != os.environ.get(
        HOST_RELEASE_VAR, platform.release()
    )


def pytest_ignore_collect(collection_path, config):
    if collection_path.is_dir() or not collection_path.name.startswith("test_"):
        return None
    runner = collection_path.name == RUNNER
    # None (not False) lets the other ignore rules still decide.
    return True if runner == in_vm() else None


@pytest.fixture(autouse=True, scope="session")
def _need_root_in_vm():
    if in_vm() and os.geteuid() != 0:
        pytest.fail("tests/vm needs root inside the VM (virtme-ng runs the guest command as root by default)")


@pytest.fixture
def netns_pair(make_netns_pair) -> NetnsPair:
    pair = make_netns_pair()
    # TCP buffers large enough for the biggest bandwidth-delay product tested
    # (100 Mbit/s x 200 ms = 2.5 MB); these sysctls are per namespace.
    for ns in (pair.src_ns, pair.dst_ns):
        sh(
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.tcp_rmem=4096 131072 16777216",
            "net.ipv4.tcp_wmem=4096 65536 16777216",
            ns=ns,
        )
    return pair


# With -D each reply line starts with its arrival time: [1700000000.123456]
_REPLY = re.compile(r"^\[([0-9.]+)\] .*icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms", re.MULTILINE)
_TOTALS = re.compile(r"(\d+) packets transmitted, (\d+) received")


@dataclass
class PingResult:
    sent: int
    received: int
    seq: list[int] = field(default_factory=list)
    rtt_ms: list[float] = field(default_factory=list)
    recv_time_s: list[float] = field(default_factory=list)

    @property
    def loss_ratio(self) -> float:
        return 1.0 - self.received / self.sent


def parse_ping(text: str) -> PingResult:
    totals = _TOTALS.search(text)
    if not totals:
        raise AssertionError(f"no ping summary in output:\n{text[-2000:]}")
    result = PingResult(int(totals.group(1)), int(totals.group(2)))
    for match in _REPLY.finditer(text):
        # Duplicate replies would count twice; netem here never duplicates.
        result.recv_time_s.append(float(match.group(1)))
        result.seq.append(int(match.group(2)))
        result.rtt_ms.append(float(match.group(3)))
    return result


class Probe:
    """Traffic between the namespaces of a pair: ping for RTT and loss, iperf3 for goodput."""

    def ping_argv(self, ns: str, dst_ip: str, count: int, interval_s: float, wait_s: float) -> list[str]:
        # -i below 0.2 s needs root; -W bounds how long the last replies are awaited.
        return [
            "ip",
            "netns",
            "exec",
            ns,
            "ping",
            "-n",
            "-D",
            "-c",
            str(count),
            "-i",
            str(interval_s),
            "-W",
            str(wait_s),
            dst_ip,
        ]

    def ping(self, ns: str, dst_ip: str, count: int, interval_s: float = 0.002, wait_s: float = 2.0) -> PingResult:
        out = subprocess.run(
            self.ping_argv(ns, dst_ip, count, interval_s, wait_s),
            text=True,
            capture_output=True,
            timeout=count * interval_s * 20 + 60,
        )
        return parse_ping(out.stdout)

    def ping_start(self, ns: str, dst_ip: str, count: int, interval_s: float, wait_s: float = 2.0) -> subprocess.Popen:
        return subprocess.Popen(
            self.ping_argv(ns, dst_ip, count, interval_s, wait_s),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def ping_finish(self, proc: subprocess.Popen, timeout_s: float) -> PingResult:
        out, _ = proc.communicate(timeout=timeout_s)
        return parse_ping(out)

    def iperf_bps(self, pair: NetnsPair, dst_ip: str, seconds: int, omit_s: int) -> float:
        """TCP goodput the receiver saw, bits/s, excluding the first `omit_s` (slow start)."""
        server = subprocess.Popen(
            ["ip", "netns", "exec", pair.dst_ns, "iperf3", "-s", "-1", "-B", dst_ip],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            out = self._iperf_client(pair.src_ns, dst_ip, seconds, omit_s)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
        report = json.loads(out)
        if "error" in report:
            raise AssertionError(f"iperf3 to {dst_ip}: {report['error']}")
        return report["end"]["sum_received"]["bits_per_second"]

    def _iperf_client(self, ns: str, dst_ip: str, seconds: int, omit_s: int) -> str:
        argv = ["ip", "netns", "exec", ns, "iperf3", "-c", dst_ip, "-t", str(seconds), "-O", str(omit_s), "-J"]
        # The server needs a moment to listen; a slow guest needs longer.
        for _ in range(50):
            out = subprocess.run(argv, text=True, capture_output=True, timeout=seconds + omit_s + 60)
            if "Connection refused" not in out.stdout:
                return out.stdout
            time.sleep(0.1)
        raise AssertionError(f"iperf3 server on {dst_ip} never listened")


@pytest.fixture
def probe() -> Probe:
    return Probe()
