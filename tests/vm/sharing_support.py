"""Helpers for tests/vm/test_sharing_vm.py: run `collapsar run` in the guest
in the background, read its status API, and read what iperf3 servers
received per second."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)


class Run:
    """`collapsar run FILE` with a status API; stdout collected line by line."""

    def __init__(self, topology: Path, run_dir: Path, subnet: str, trace: Path | None = None):
        env = {**os.environ, **({"COLLAPSAR_SHARE_TRACE": str(trace)} if trace else {})}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "collapsar.cli",
                "run",
                str(topology),
                "--run-dir",
                str(run_dir),
                "--subnet",
                subnet,
                "--grace",
                "1s",
                "--status-port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.port: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("status: http://127.0.0.1:"):
                self.port = int(line.split(":")[3].split("/")[0])

    def wait_line(self, prefix: str, timeout_s: float = 300.0) -> str:
        """Python's imports alone take tens of seconds on the guest's emulated CPUs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            found = [line for line in self.lines if line.startswith(prefix)]
            if found:
                return found[0]
            time.sleep(0.1)
        raise AssertionError(f"no {prefix!r} line: {self.lines}")

    def status(self, timeout_s: float = 300.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while self.port is None:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no status API: {self.lines}")
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=10) as answer:
            return json.loads(answer.read())

    def finish(self, timeout_s: float = 300.0) -> int:
        try:
            code = self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self.stderr = self.proc.stderr.read()
        return code


def received_per_second(path: Path) -> list[float]:
    return [i["sum"]["bits_per_second"] for i in json.loads(path.read_text())["intervals"]]


def udp_lost_ratio(path: Path) -> float:
    end = json.loads(path.read_text())["end"]["sum"]
    return end["lost_packets"] / end["packets"] if end.get("packets") else 0.0


def udp_rates(path: Path) -> tuple[float, float]:
    """(offered, received) bit/s at an iperf3 UDP receiver: what the sender
    managed to send (every packet it numbered) and what arrived.  On the
    guest's emulated CPUs a sender asked for 4 Mbit/s may send less.  The
    receiver's end summary reports 0 bytes for UDP, so the intervals are summed."""
    doc = json.loads(path.read_text())
    end = doc["end"]["sum"]
    seconds = sum(i["sum"]["seconds"] for i in doc["intervals"])
    received_bytes = sum(i["sum"]["bytes"] for i in doc["intervals"])
    arrived = end["packets"] - end["lost_packets"]
    if not arrived or not seconds:
        return 0.0, 0.0
    received = received_bytes * 8 / seconds
    return received * end["packets"] / arrived, received


def trace_summary(path: Path, src: str) -> str:
    """For a failure message: the loop's pace and when `src` got its share."""
    if not path.exists():
        return "no sharing trace"
    periods = [json.loads(line) for line in path.read_text().splitlines()]
    gaps = [(b["t_us"] - a["t_us"]) // 1000 for a, b in zip(periods, periods[1:])]
    seen = [
        (p["period"], p["t_us"] // 1000, f["measured_bps"], f["allowed_bps"])
        for p in periods
        for f in p["flows"]
        if f["src"] == src
    ]
    return (
        f"{len(periods)} periods, gaps ms max {max(gaps, default=0)} median "
        f"{sorted(gaps)[len(gaps) // 2] if gaps else 0}; {src} (period, ms, measured, allowed): "
        f"{seen[:3]} ... {seen[-3:]} ({len(seen)} periods active)"
    )
