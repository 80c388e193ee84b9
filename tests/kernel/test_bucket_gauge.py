"""The egress bucket's level as the status rows show it (measure/bucket.py),
followed from a real tbf's byte counter while a flood drains its credits.

Credits {baseline: 2Mbps, burst-rate: 10Mbps, credits: 1s}: a flood at 30
Mbit/s leaves at 10 Mbit/s and spends the credits at 8 Mbit/s, so they are
gone 1 s after it starts, and from then on the bucket sends at 2 Mbit/s with
nothing left over.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from collapsar.egress import EgressBucket
from collapsar.manager.measure.bucket import BucketGauge
from collapsar.tcal import Shaping
from collapsar.tcal.bucket import tbf_params

CREDITS = EgressBucket(2_000_000, (10_000_000 - 2_000_000) * 1 // 8, 10_000_000, None, credits=True)


def test_the_gauge_sees_the_credits_drain_when_the_kernel_spends_them(tree_factory):
    pair, tree = tree_factory(n_dst=1, bucket=CREDITS)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, rate_bps=None)])
    start_bytes = tree.bucket_sent_bytes()
    assert start_bytes is not None
    gauge = BucketGauge(CREDITS, tbf_params(CREDITS, wire_overhead=True), time.monotonic(), start_bytes)
    assert gauge.as_dict()["credits_s"] == pytest.approx(1.0, abs=0.002)
    flood = subprocess.Popen(
        ["ip", "netns", "exec", pair.src_ns, "python3", "-c", FLOOD, ip],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    readings: list[tuple[float, float]] = []
    try:
        began = None
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            gauge.sample(tree.bucket_sent_bytes() or 0, now)
            if began is None and gauge.as_dict()["credits_s"] < 0.99:
                began = now  # the first bytes left
            if began is not None:
                readings.append((now - began, gauge.as_dict()["credits_s"]))
            time.sleep(0.05)
    finally:
        flood.kill()
        flood.wait()
    assert began is not None, "the flood never spent a credit"
    gone = next(t for t, credits in readings if credits < 0.02)
    print(f"credits gone {gone:.2f} s after the flood's first bytes; last reading {readings[-1]}")
    assert 0.85 <= gone <= 1.2
    # Half way they are about half spent, and once spent they stay spent (the baseline leaves nothing over).
    halfway = min(readings, key=lambda r: abs(r[0] - 0.5))[1]
    assert halfway == pytest.approx(0.5, abs=0.12)
    assert all(credits < 0.03 for t, credits in readings if t > gone + 0.3)
    assert gauge.as_dict()["fill"] < 0.03


FLOOD = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"x" * 1400
gap = 1442 * 8 / 30e6  # 30 Mbit/s of frames
next_send = time.monotonic()
while True:
    s.sendto(payload, (sys.argv[1], 9))
    next_send += gap
    pause = next_send - time.monotonic()
    if pause > 0:
        time.sleep(pause)
"""
