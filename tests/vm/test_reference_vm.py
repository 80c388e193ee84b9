"""The hop-by-hop reference network (tests/reference_net.py) in the stock-kernel VM, where netem exists.

Two properties a collapsed path must share with the network it stands for:
- delays add per direction and per hop: a path of three links with 5, 10
  and 20 ms has a 70 ms round trip (six netems crossed);
- a saturated bottleneck delays a packet by the queue in front of it: the
  reference sizes that queue by its bandwidth-delay rule (reference_plan),
  so a ping sent while one TCP flow fills the link waits up to one full
  queue, Q frames of 1538 wire bytes at the rate (about one round trip).

As in test_netem.py: medians and lower percentiles, netem never releases a
packet early (hard, every attempt), and timing figures are soft, measured
again up to ATTEMPTS times because a busy host only makes the emulated
machine later.  Each netem's timer adds a little: EXCESS_MS per crossing.
Rates are a few Mbit/s, which the emulated CPU carries faithfully.
Standard library only (numpy costs minutes here).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time

from reference_net import ReferenceNet
from reference_plan import queue_pkts
from test_netem import outside, percentile, until_in_bounds

from collapsar.parser import parse_text

EXCESS_MS = 0.8  # what one netem crossing adds to a median, at most (test_netem: 0.7-1.8 ms per RTT)
WIRE_FRAME_BITS = 1538 * 8

PATH3 = """\
experiment: {name: reference-path3}
services:
  c: {command: [sleep, "600"]}
  s: {command: [sleep, "600"]}
bridges: [b1, b2]
links:
  - {from: c, to: b1, latency: 5ms, bandwidth: 4Mbps}
  - {from: b1, to: b2, latency: 10ms, bandwidth: 4Mbps}
  - {from: b2, to: s, latency: 20ms, bandwidth: 4Mbps}
"""

BOTTLENECK_BPS = 4_000_000
BOTTLENECK = """\
experiment: {name: reference-bottleneck}
services:
  c: {command: [sleep, "600"]}
  s: {command: [iperf3, -s, -p, "5401"]}
bridges: [b1, b2]
links:
  - {from: c, to: b1, latency: 5ms, bandwidth: 8Mbps}
  - {from: b1, to: b2, latency: 20ms, bandwidth: 4Mbps}
  - {from: b2, to: s, latency: 5ms, bandwidth: 8Mbps}
"""
BASE_RTT_MS = 60


def rtts_ms(net: ReferenceNet, count: int, interval_s: float) -> tuple[int, list[float]]:
    argv = ["ping", "-n", "-c", str(count), "-i", str(interval_s), "-W", "3", net.ip("s")]
    out = net.sh("c", *argv, timeout_s=count * interval_s * 10 + 60, check=False).stdout
    return count, [float(t) for t in re.findall(r"time=([0-9.]+) ms", out)]


def test_reference_delays_add_per_hop_and_direction(record_property):
    with ReferenceNet(parse_text(PATH3, "path3.yaml")) as net:
        net.start()
        expected = 2 * (5 + 10 + 20)

        def attempt():
            sent, rtt = rtts_ms(net, 300, 0.02)
            assert len(rtt) == sent, f"{sent - len(rtt)} of {sent} pings lost on a lossless path"
            assert min(rtt) >= expected, f"a ping came back in {min(rtt)} ms: netem released it early"
            median = statistics.median(rtt)
            figures = {"median_ms": median, "p5_ms": percentile(rtt, 5), "p95_ms": percentile(rtt, 95)}
            return figures, outside("median", median, expected, expected + 6 * EXCESS_MS + 0.5)

        until_in_bounds(record_property, attempt)


def test_reference_queue_under_load_is_the_bdp_rule(record_property):
    with ReferenceNet(parse_text(BOTTLENECK, "bottleneck.yaml")) as net:
        net.start()
        (core,) = [hop for hop in net.plan.hops if (hop.src, hop.dst) == ("b1", "b2")]
        # The longest round trip over b1 -> b2 is c <-> s: 60 ms; 4 Mbit/s x 60 ms = 19.5 frames.
        assert core.rtt_us == BASE_RTT_MS * 1000
        assert core.queue_pkts == queue_pkts(BOTTLENECK_BPS, 60_000, True) == 20
        full_ms = core.queue_pkts * WIRE_FRAME_BITS / BOTTLENECK_BPS * 1000  # 61.5 ms
        record_property("full_queue_ms", f"{full_ms:.3f}")

        def attempt():
            _, idle = rtts_ms(net, 50, 0.05)
            base = statistics.median(idle)
            flow = net.popen(
                "c",
                ["iperf3", "-c", "s", "-p", "5401", "-t", "22", "-J"],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(7)  # slow start is over, the queue oscillates
            _, loaded = rtts_ms(net, 200, 0.05)
            out, _ = flow.communicate(timeout=60)
            report = json.loads(out)
            assert "error" not in report, report["error"]
            goodput = report["end"]["sum_received"]["bits_per_second"] / BOTTLENECK_BPS
            waits = [r - base for r in loaded]
            figures = {
                "idle_median_ms": base,
                "wait_median_ms": statistics.median(waits),
                "wait_p95_ms": percentile(waits, 95),
                "wait_p99_ms": percentile(waits, 99),
                "goodput_ratio": goodput,
            }
            assert len(loaded) >= 150, f"only {len(loaded)} of 200 pings came back under load"
            return figures, (
                outside("idle median", base, BASE_RTT_MS, BASE_RTT_MS + 6 * EXCESS_MS + 0.5)
                # CUBIC keeps a drop-tail queue between about 0.4 and 1 of its size.
                + outside("median wait", statistics.median(waits), 0.3 * full_ms, 1.0 * full_ms)
                # Near full at times, never much more: the queue's frames (netem holds the
                # delay line on top), plus a frame or two of TCP's ahead of the ping at c.
                + outside("p95 wait", percentile(waits, 95), 0.7 * full_ms, 1.1 * full_ms + 3)
                + outside("goodput / rate", goodput, 0.88, 0.945)
            )

        until_in_bounds(record_property, attempt)
