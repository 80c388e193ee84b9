"""Packet duplication through a netem leaf with delay and loss, on Debian's
stock kernel: the eBPF duplicator (collapsar.tcal.duplicate) copies, and the
copy takes the netem like its original, with a loss draw of its own.

A duplicating netem cannot share a tree with other netems on this kernel
(6.1), which is why the copy is not netem's.  Numbered UDP datagrams
(tests/udpseq.py); counts of independent events within the binomial band
(false-failure odds 1e-4)."""

from __future__ import annotations

import os

import pytest
from binomial import binomial_band
from netns_helpers import sh
from udpseq import stream

from collapsar.impairments import Extras
from collapsar.tcal import Shaping, TcTree

COUNT, INTERVAL_S = 4000, 0.001
DELAY_US, LOSS, DUPLICATE = 20_000, 0.2, 0.3


@pytest.fixture
def tree(netns_pair):
    made = TcTree(netns_pair.src_if, netns=netns_pair.src_ns)
    yield made
    made.teardown()


def test_the_copy_goes_through_the_netem_leaf_with_its_own_loss(netns_pair, tree, record_property):
    ip = netns_pair.dst_ips[0]
    tree.setup([Shaping(ip, None, delay_us=DELAY_US, loss_ratio=LOSS, extras=Extras(duplicate_ratio=DUPLICATE))])
    assert "duplicate" not in sh("tc", "qdisc", "show", "dev", netns_pair.src_if, ns=netns_pair.src_ns).stdout
    # One flow on one receiving CPU (RPS), as in test_netem_impairments' in-order
    # test: else netem's timer, firing on either CPU, lets another datagram
    # slip between a copy and its original (CI saw one 3 places apart).
    cpus = format((1 << os.cpu_count()) - 1, "x")
    sh("sh", "-c", f"echo {cpus} > /sys/class/net/{netns_pair.dst_if}/queues/rx-0/rps_cpus", ns=netns_pair.dst_ns)
    got = stream(netns_pair.src_ns, netns_pair.dst_ns, ip, COUNT, INTERVAL_S)
    seen: dict[int, int] = {}
    first: dict[int, int] = {}
    for i, number in enumerate(got.numbers):
        seen[number] = seen.get(number, 0) + 1
        # Same delay, the copy enqueued just before: both arrive together.
        assert first.setdefault(number, i) in (i, i - 1), f"{number}'s two arrivals are apart"
    twice = sum(1 for c in seen.values() if c == 2)
    missing = COUNT - len(seen)
    # Independent draws: copied and both kept, 0.3 x 0.8 x 0.8 (a shared draw
    # would give 0.3 x 0.8 = 0.24, outside the band); never arrived: lost, and
    # no copy or the copy lost too, 0.2 x (1 - 0.3 x 0.8).
    p_twice, p_missing = DUPLICATE * (1 - LOSS) ** 2, LOSS * (1 - DUPLICATE * (1 - LOSS))
    record_property(
        "figures",
        f"duplicate {DUPLICATE} loss {LOSS} delay {DELAY_US} us: {twice} of {COUNT} twice "
        f"(expected {p_twice * COUNT:.0f}), {missing} never (expected {p_missing * COUNT:.0f}), "
        f"min delay {min(got.delays_ms()):.2f} ms",
    )
    assert max(seen.values()) <= 2
    low, high = binomial_band(COUNT, p_twice)
    assert low <= twice <= high, f"{twice} numbers arrived twice: expected {low}..{high}"
    low, high = binomial_band(COUNT, p_missing)
    assert low <= missing <= high, f"{missing} numbers never arrived: expected {low}..{high}"
    assert min(got.delays_ms()) >= DELAY_US / 1000  # the copies were delayed too
    assert got.damaged == 0
