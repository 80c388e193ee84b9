"""Burst loss, reordering, corruption and jitter in order through the TCAL,
measured in the stock-kernel VM with numbered UDP datagrams (tests/udpseq.py).

Each test shapes sender -> receiver with `TcTree` on the sender's veth, sends
a paced stream and reads what arrived: which numbers never came (loss and its
runs), which overtook lower ones (reordering), which came damaged
(corruption, the UDP checksum being off) and each one's one-way delay (both
namespaces read the same clock).

Bounds: a loss count from a Markov chain varies more than a binomial one; its
variance is n (rate (1 - rate) + 2 c^2 pi_good pi_bad lam / (1 - lam)), with
c the difference of the two states' loss and lam = 1 - to_bad - to_good the
chain's memory per packet.  Counts are held within 4.5 standard deviations
(false-failure odds ~1e-5); a mean burst within 4.5 standard errors of its
runs.  Counts of independent events use the binomial band (tests/binomial.py).
"""

from __future__ import annotations

import math
import os
import statistics

import pytest
from binomial import binomial_band
from netns_helpers import sh
from test_netem import percentile
from udpseq import Stream, stream

from collapsar.impairments import Extras, LossModel
from collapsar.tcal import Shaping, TcTree

SDS = 4.5


@pytest.fixture
def shape(netns_pair):
    """Yields (pair, make): make(**Shaping fields) shapes the pair's first destination."""
    trees: list[TcTree] = []

    def make(**fields) -> TcTree:
        tree = TcTree(netns_pair.src_if, netns=netns_pair.src_ns)
        trees.append(tree)
        tree.setup([Shaping(netns_pair.dst_ips[0], rate_bps=None, **fields)])
        return tree

    yield netns_pair, make
    for tree in trees:
        tree.teardown()


def send(pair, count: int, interval_s: float = 0.001) -> Stream:
    return stream(pair.src_ns, pair.dst_ns, pair.dst_ips[0], count, interval_s)


def chain_sd(n: int, model: LossModel) -> float:
    """The standard deviation of a stationary chain's loss count over n packets."""
    bad = model.bad_share
    memory = 1.0 - model.to_bad - model.to_good
    spread = (model.loss_in_bad - model.loss_in_good) ** 2 * bad * (1 - bad)
    return math.sqrt(n * (model.rate * (1 - model.rate) + 2 * spread * memory / (1 - memory)))


@pytest.mark.parametrize(
    "name,model",
    [
        ("5% in bursts of 4", LossModel.bursts(0.05, 4)),
        ("Gilbert-Elliott 2%/20%, 50% in bad, 1% in good", LossModel(0.02, 0.2, 0.5, 0.01)),
    ],
)
def test_burst_loss_has_its_rate_and_mean_burst(shape, record_property, name, model):
    pair, make = shape
    make(loss_ratio=model.rate, extras=Extras(loss_model=model))
    n = 8000
    got = send(pair, n)
    lost, runs = sum(got.lost()), got.loss_runs()
    burst = statistics.mean(runs)
    burst_se = statistics.stdev(runs) / math.sqrt(len(runs))
    record_property(
        "figures",
        f"{name}: lost {lost}/{n} = {lost / n:.4f} (expected {model.rate:.4f} +/- {chain_sd(n, model) / n:.4f} sd); "
        f"mean burst {burst:.3f} over {len(runs)} runs (expected {model.mean_burst():.3f} +/- {burst_se:.3f} se)",
    )
    assert got.damaged == 0 and got.duplicated() == 0 and got.late() == 0
    assert abs(lost - n * model.rate) <= SDS * chain_sd(n, model), f"{lost} of {n} lost"
    assert abs(burst - model.mean_burst()) <= SDS * burst_se, f"mean burst {burst:.3f}"


def test_bernoulli_loss_comes_one_packet_at_a_time(shape, record_property):
    """The contrast: the same 5% without a chain has runs of 1/(1 - 0.05) packets."""
    pair, make = shape
    make(loss_ratio=0.05)
    got = send(pair, 8000)
    runs = got.loss_runs()
    burst, se = statistics.mean(runs), statistics.stdev(runs) / math.sqrt(len(runs))
    record_property("figures", f"Bernoulli 5%: mean burst {burst:.3f} over {len(runs)} runs (expected 1.053)")
    assert abs(burst - 1 / 0.95) <= SDS * se


def test_reordering_sends_that_share_ahead(shape, record_property):
    """netem sends a reordered packet at once, ahead of the 10 ms delay line."""
    pair, make = shape
    make(delay_us=10_000, extras=Extras(reorder_ratio=0.05))
    n = 4000
    got = send(pair, n)
    early = got.early()
    low, high = binomial_band(n, 0.05)
    record_property("figures", f"reorder 5%: {early}/{n} overtook (band {low}..{high}), {got.late()} arrived late")
    assert len(got.arrivals) == n and got.duplicated() == 0
    assert low <= early <= high


def test_corruption_damages_that_share(shape, record_property):
    """One flipped bit per corrupted packet: in the payload it arrives damaged,
    in a header the receiver drops it; only a flip in the source MAC address
    (6 of 1042 bytes) goes unnoticed."""
    pair, make = shape
    make(extras=Extras(corrupt_ratio=0.05))
    n = 4000
    got = send(pair, n)
    affected = sum(got.lost())  # dropped, or arrived damaged (not counted as arrived)
    low, high = binomial_band(n, 0.05 * (1 - 6 / 1042))[0], binomial_band(n, 0.05)[1]
    record_property(
        "figures",
        f"corrupt 5%: {affected} of {n} affected (band {low}..{high}): {got.damaged} arrived damaged, "
        f"{affected - got.damaged} dropped",
    )
    assert got.damaged > 0.8 * affected  # the payload is most of each packet
    assert low <= affected <= high


def test_jitter_in_order_never_reorders(shape, record_property):
    """20 ms +/- 5 ms at a datagram per millisecond: independent delays
    reorder a large share; in order, none, and no packet leaves earlier than
    its own delay draw allows (so never below the distribution's low end)."""
    pair, make = shape
    # veth hands a packet to the receive backlog of the CPU that sent it, and
    # netem's timer releases packets on either CPU, so two CPUs can deliver
    # two packets in the other order (measured: 14 of 3000 "in order" packets
    # arrived late without this).  Steering the receiver's packets by flow
    # (RPS, as a NIC's RSS does) keeps one flow on one CPU, so what is
    # measured is the link's order.
    cpus = format((1 << os.cpu_count()) - 1, "x")
    sh("sh", "-c", f"echo {cpus} > /sys/class/net/{pair.dst_if}/queues/rx-0/rps_cpus", ns=pair.dst_ns)
    figures = {}
    tree = make(delay_us=20_000, jitter_us=5_000)
    for in_order in (False, True):
        tree.change(pair.dst_ips[0], extras=Extras(in_order=in_order))
        shown = sh("tc", "qdisc", "show", "dev", pair.src_if, ns=pair.src_ns).stdout
        assert ("rate 100Gbit" in shown) is in_order, shown
        got = send(pair, 3000)
        delays = got.delays_ms()
        figures[in_order] = (got.late(), statistics.median(delays), statistics.mean(delays), statistics.pstdev(delays))
        assert len(got.arrivals) == 3000
        assert percentile(delays, 1) >= 20 - 4 * 5
    record_property(
        "figures",
        "; ".join(
            f"{'in order' if k else 'independent'}: {late}/3000 late, delay median {med:.2f} mean {mean:.2f} sd "
            f"{sd:.2f} ms"
            for k, (late, med, mean, sd) in figures.items()
        ),
    )
    assert figures[True][0] == 0
    assert figures[False][0] > 0.2 * 3000
    assert 19.0 <= figures[False][1] <= 23.0  # the configured median, plus the machine's own delay


def test_changes_replace_every_impairment(shape):
    """Every change carries the whole model: a chain replaced by Bernoulli
    loss, reordering and order switched off, read back from the kernel."""
    pair, make = shape
    chain = LossModel.bursts(0.01, 3)
    tree = make(
        delay_us=10_000,
        jitter_us=1_000,
        loss_ratio=chain.rate,
        extras=Extras(loss_model=chain, reorder_ratio=0.02, corrupt_ratio=0.01, in_order=True),
    )

    def shown() -> str:
        out = sh("tc", "qdisc", "show", "dev", pair.src_if, ns=pair.src_ns).stdout
        return next(line for line in out.splitlines() if "delay" in line)

    first = shown()
    for part in ("loss gemodel", "reorder 2%", "corrupt 1%", "rate 100Gbit", "gap 1"):
        assert part in first, first
    tree.change(pair.dst_ips[0], loss_ratio=0.02, extras=Extras())
    second = shown()
    assert "loss 2%" in second and "gemodel" not in second, second
    for part in ("reorder", "corrupt", "rate", "gap"):
        assert part not in second, second
