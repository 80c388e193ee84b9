"""netem through the TCAL, measured in the stock-kernel VM.

Every test shapes sender -> receiver with `TcTree` on the sender's veth and
measures with ping (RTT, loss) or iperf3 (goodput).  The reply path is not
shaped, so an RTT is the configured one-way delay plus what the emulated
machine adds: its own round trip (median 0.4-0.5 ms) and the lateness of
netem's timer (measured in this VM: median RTT 0.7-1.8 ms above the delay,
the upper end when the host is busy).  A busy host also stretches the upper
tail by tens of milliseconds, so assertions use the median, lower
percentiles (netem never releases a packet early) and loose upper
percentiles, never the maximum.

Sample counts (the tier should fit in ~10 minutes of a slow guest): 1000
pings per delay case at 5 ms spacing (5 s; 2 ms spacing starves the guest's
CPU and fattens the tail) put ~25 samples in each 2.5% tail; 2000 pings per
loss case make the binomial acceptance band (false-failure odds 1e-4) narrow
enough to tell 1% from 0% or 2%, and 10% from 7% or 13%; iperf3 runs 8 s
after omitting 4 s of slow start.

A busy host only ever makes the emulated machine later and slower, never
earlier or faster, and it comes and goes (measured: a 50 ms +/- 5 ms median
moved from 51.5 to 55.1 ms and 100 Mbit/s x 200 ms goodput fell from 92 to
23 Mbit/s while other jobs loaded the host).  So the timing figures are
soft: re-measured up to ATTEMPTS times, failing only if every attempt
misses; a real defect (wrong delay, unsized limit) misses every time.
Guarantees no load can break (netem never releases a packet early, no
packet lost without configured loss, no unshaped window) are hard: checked
on every attempt, never retried.

Only the standard library here: importing numpy and scipy.stats costs minutes
in an emulated CPU.
"""

from __future__ import annotations

import math
import os
import statistics
import time

import pytest
from binomial import binomial_band
from netns_helpers import sh

from collapsar.tcal import Shaping, TcTree

# Most an emulated machine adds to a median RTT over the configured delay.
EXCESS_MS = 2.5
PING_COUNT, PING_INTERVAL_S = 1000, 0.005
ATTEMPTS = 3


def until_in_bounds(record_property, attempt) -> None:
    """Run `attempt()` -> (figures, soft problems) until it reports none.

    Hard checks inside `attempt` raise at once.  Every attempt's figures are
    recorded so the tier's report shows what the host's load did."""
    misses = []
    for number in range(1, ATTEMPTS + 1):
        figures, problems = attempt()
        tag = "" if number == 1 else f"attempt{number}_"
        for name, value in figures.items():
            record_property(tag + name, value if isinstance(value, str) else f"{value:.3f}")
        if not problems:
            return
        misses.append(f"attempt {number}: " + "; ".join(problems))
    raise AssertionError("every attempt missed:\n" + "\n".join(misses))


def outside(name: str, value: float, low: float, high: float) -> list[str]:
    return [] if low <= value <= high else [f"{name} {value:.3f} not in [{low:.3f}, {high:.3f}]"]


@pytest.fixture
def shaped(netns_pair, probe, record_property):
    """Yields (pair, make): make(**Shaping fields) shapes the pair's first
    destination with a TcTree, torn down after the test."""
    trees: list[TcTree] = []
    pair = netns_pair
    base = probe.ping(pair.src_ns, pair.dst_ips[0], count=200, interval_s=PING_INTERVAL_S)
    record_property("base_median_ms", f"{statistics.median(base.rtt_ms):.3f}")
    assert base.received == base.sent, f"unshaped pair lost {base.sent - base.received} of {base.sent} pings"

    def make(**fields) -> TcTree:
        tree = TcTree(pair.src_if, netns=pair.src_ns)
        trees.append(tree)
        tree.setup([Shaping(pair.dst_ips[0], **fields)])
        return tree

    yield pair, make
    for tree in trees:
        tree.teardown()


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile, interpolating linearly between order statistics."""
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def resolution_ms(rtt_ms: float) -> float:
    # ping prints 3 significant digits: whole milliseconds from 100 ms up.
    return 1.0 if rtt_ms >= 100 else 0.1 if rtt_ms >= 10 else 0.01


def record(record_property, **figures: float) -> None:
    for name, value in figures.items():
        record_property(name, f"{value:.3f}")


@pytest.mark.parametrize("delay_ms", [10, 50, 100])
def test_delay_without_jitter(shaped, probe, record_property, delay_ms):
    pair, make = shaped
    make(rate_bps=None, delay_us=delay_ms * 1000)

    def attempt():
        got = probe.ping(pair.src_ns, pair.dst_ips[0], count=PING_COUNT, interval_s=PING_INTERVAL_S)
        assert got.received == got.sent == PING_COUNT
        rtt = got.rtt_ms
        # netem never releases a packet early.
        assert percentile(rtt, 1) >= delay_ms
        median_ms, p75 = statistics.median(rtt), percentile(rtt, 75)
        slack = EXCESS_MS + resolution_ms(median_ms)
        figures = {"median_ms": median_ms, "p1_ms": percentile(rtt, 1), "p75_ms": p75, "p95_ms": percentile(rtt, 95)}
        return figures, (
            outside("median", median_ms, delay_ms, delay_ms + slack)
            # three quarters of the samples stay close to the delay
            + outside("p75", p75, delay_ms, delay_ms + slack + 1.0)
        )

    until_in_bounds(record_property, attempt)


@pytest.mark.parametrize("delay_ms,jitter_ms", [(10, 2), (50, 5), (100, 10)])
def test_delay_with_normal_jitter(shaped, probe, record_property, delay_ms, jitter_ms):
    """With a normal distribution netem's jitter is its standard deviation
    (measured on a quiet host at 50 +/- 5 ms: median 51.5, p15.9 46.2,
    p84.1 57.0, p2.5 41.2 ms; the same through raw tc)."""
    pair, make = shaped
    make(rate_bps=None, delay_us=delay_ms * 1000, jitter_us=jitter_ms * 1000, distribution="normal")

    def attempt():
        got = probe.ping(pair.src_ns, pair.dst_ips[0], count=PING_COUNT, interval_s=PING_INTERVAL_S)
        assert got.received == got.sent == PING_COUNT
        rtt = got.rtt_ms
        median_ms = statistics.median(rtt)
        p2_5, p15_9, p84_1 = (percentile(rtt, q) for q in (2.5, 15.87, 84.13))
        sigma_ms = (p84_1 - p15_9) / 2
        # Standard error of a median of n normal samples: 1.25 sigma / sqrt(n).
        median_slack = 4 * 1.2533 * jitter_ms / math.sqrt(len(rtt)) + resolution_ms(median_ms)
        low_2_5 = delay_ms - 1.96 * jitter_ms
        figures = {"median_ms": median_ms, "sigma_ms": sigma_ms, "p2_5_ms": p2_5, "p15_9_ms": p15_9, "p84_1_ms": p84_1}
        return figures, (
            outside("median", median_ms, delay_ms - median_slack, delay_ms + EXCESS_MS + median_slack)
            + outside("sigma from p15.9..p84.1", sigma_ms, 0.8 * jitter_ms, 1.2 * jitter_ms)
            # about 2.5% of the samples below D - 1.96 J (plus what the machine adds)
            + outside("p2.5", p2_5, low_2_5 - 0.2 * jitter_ms, low_2_5 + EXCESS_MS)
        )

    until_in_bounds(record_property, attempt)


@pytest.mark.parametrize("loss_ratio", [0.01, 0.10])
def test_loss(shaped, probe, record_property, loss_ratio):
    pair, make = shaped
    n = 2000
    make(rate_bps=None, loss_ratio=loss_ratio)
    got = probe.ping(pair.src_ns, pair.dst_ips[0], count=n, interval_s=PING_INTERVAL_S)
    lost = got.sent - got.received
    low, high = binomial_band(n, loss_ratio)
    record_property("lost", f"{lost}/{n} = {lost / n:.2%} (band {low}..{high})")
    assert got.sent == n
    assert low <= lost <= high, f"{lost} of {n} lost, expected {low}..{high} for loss_ratio {loss_ratio}"


def test_delay_change_mid_flow(shaped, probe, record_property):
    """The RTT moves from the old delay to the new one while pings flow, and no
    packet sees an unshaped window (every RTT is at least the old delay)."""
    pair, make = shaped
    old_ms, new_ms, interval_s, count = 10, 50, 0.01, 400
    tree = make(rate_bps=None, delay_us=old_ms * 1000)

    def attempt():
        current = tree.shapings[pair.dst_ips[0]].delay_us // 1000
        first_ms, then_ms = (old_ms, new_ms) if current == old_ms else (new_ms, old_ms)
        ping = probe.ping_start(pair.src_ns, pair.dst_ips[0], count=count, interval_s=interval_s)
        time.sleep(count * interval_s / 2)
        changed_from = time.time()
        tree.change(pair.dst_ips[0], delay_us=then_ms * 1000)
        changed_to = time.time()
        got = probe.ping_finish(ping, timeout_s=count * interval_s * 20 + 60)
        assert got.received == got.sent == count
        # An in-place change leaves no unshaped window: not one packet got through faster.
        assert min(got.rtt_ms) >= min(old_ms, new_ms)
        # Sent = printed - RTT.  ping prints (-D) when it gets to the reply, which
        # a busy guest delays: 0.1 s either side of the change is left out.
        sent_at = [t - r / 1000 for t, r in zip(got.recv_time_s, got.rtt_ms)]
        before = [r for s, r in zip(sent_at, got.rtt_ms) if s < changed_from - 0.1]
        after = [r for s, r in zip(sent_at, got.rtt_ms) if s > changed_to + 0.1]
        assert len(before) >= 50 and len(after) >= 50, (len(before), len(after))
        figures = {
            "delays": f"{first_ms} -> {then_ms} ms",
            "before_median_ms": statistics.median(before),
            "after_median_ms": statistics.median(after),
            "after_p5_ms": percentile(after, 5),
            "change_took_ms": (changed_to - changed_from) * 1000,
        }
        return figures, (
            outside("median before", statistics.median(before), first_ms, first_ms + EXCESS_MS)
            + outside("median after", statistics.median(after), then_ms, then_ms + EXCESS_MS)
            + outside("p5 after", percentile(after, 5), then_ms, then_ms + EXCESS_MS + 1.0)
        )

    until_in_bounds(record_property, attempt)


def goodput_ratio(probe, pair, rate_mbps: int) -> float:
    return probe.iperf_bps(pair, pair.dst_ips[0], seconds=8, omit_s=4) / (rate_mbps * 10**6)


@pytest.mark.parametrize("rate_mbps,delay_ms", [(10, 50), (100, 200)])
def test_throughput_with_delay(shaped, probe, record_property, rate_mbps, delay_ms):
    """TCP goodput through htb + netem with the bandwidth-delay-product limit.

    A real Ethernet link delivers 1448 payload bytes per 1538 wire bytes =
    94.1% of its rate (the TCAL models that overhead; its accuracy is the
    kernel tier's to check: the emulated machine loses a few percent more,
    measured 0.906-0.921).  At 100 Mbit/s x 200 ms the path holds 1650 full
    frames, more than netem's default 1000-packet limit.
    """
    pair, make = shaped
    make(rate_bps=rate_mbps * 10**6, delay_us=delay_ms * 1000)

    def attempt():
        ratio = goodput_ratio(probe, pair, rate_mbps)
        # Above 95.5% the shaping (or its wire overhead) is missing.
        assert ratio <= 0.955, f"goodput {ratio:.3f} of the rate: more than a real link delivers"
        return {"goodput_ratio": ratio}, outside("goodput / rate", ratio, 0.85, 0.955)

    until_in_bounds(record_property, attempt)


@pytest.mark.skipif(
    os.environ.get("COLLAPSAR_LONG_TESTS") != "1",
    reason="a kernel fact behind the limit's sizing, 60 s in the VM: set COLLAPSAR_LONG_TESTS=1",
)
def test_default_netem_limit_stalls_long_fat_path(netns_pair, probe, record_property):
    """Why the TCAL sizes the limit: a 25 Mbit/s x 1 s path built with raw tc,
    first with netem's default 1000-packet limit, then with the limit raised
    to the bandwidth-delay product (2063 frames) with headroom.

    GSO is off on the sender (gso_max_segs 1): netem counts skbs, and a GSO
    super-packet carries up to 45 frames, which hides the limit (measured at
    100 Mbit/s x 200 ms with GSO on: 87% of the rate even at limit 1000).
    Without GSO this VM cannot carry 100 Mbit/s at all (51% with the sized
    limit), hence the lower rate and the longer delay."""
    pair = netns_pair
    sh("ip", "link", "set", "dev", pair.src_if, "gso_max_segs", "1", ns=pair.src_ns)
    assert "gso_max_segs 1 " in sh("ip", "-d", "link", "show", "dev", pair.src_if, ns=pair.src_ns).stdout
    for argv in (
        ["qdisc", "add", "dev", pair.src_if, "root", "handle", "1:", "htb", "default", "10"],
        ["class", "add", "dev", pair.src_if, "parent", "1:", "classid", "1:10", "htb", "rate", "25mbit"],
        ["qdisc", "add", "dev", pair.src_if, "parent", "1:10", "handle", "10:", "netem", "delay", "1s"],
    ):
        sh("tc", *argv, ns=pair.src_ns)
    assert "limit 1000 " in sh("tc", "qdisc", "show", "dev", pair.src_if, ns=pair.src_ns).stdout
    # Slow start needs about 8 round trips of 1 s to fill this path.
    default_bps = probe.iperf_bps(pair, pair.dst_ips[0], seconds=10, omit_s=10)
    sh(
        "tc",
        "qdisc",
        "change",
        "dev",
        pair.src_if,
        "parent",
        "1:10",
        "handle",
        "10:",
        "netem",
        "delay",
        "1s",
        "limit",
        "4200",
        ns=pair.src_ns,
    )
    sized_bps = probe.iperf_bps(pair, pair.dst_ips[0], seconds=10, omit_s=10)
    default_ratio, sized_ratio = default_bps / 25e6, sized_bps / 25e6
    record(record_property, default_limit_goodput_ratio=default_ratio, sized_limit_goodput_ratio=sized_ratio)
    # At most 1000 of the 2063 frames in flight fit: under half the rate.
    assert default_ratio < 0.5
    assert sized_ratio > 0.8
