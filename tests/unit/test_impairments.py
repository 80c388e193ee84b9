"""Burst loss, reordering, duplication, corruption, order and queues: each
link's figures and their composition along a path (collapsar.impairments)."""

from __future__ import annotations

import numpy as np
import pytest

from collapsar.impairments import (
    NO_EXTRAS,
    Extras,
    LossModel,
    Queue,
    burst_of,
    compose,
    compose_duplicate,
    compose_loss,
    compose_reorder,
    with_loss,
)


def simulate(models: list[LossModel | None], bernoulli: list[float], n: int, seed: int = 7) -> np.ndarray:
    """Per packet, lost anywhere on a path of these independent links (chains start stationary)."""
    rng = np.random.default_rng(seed)
    lost = np.zeros(n, bool)
    for model in models:
        assert model is not None
        bad = rng.random() < model.bad_share
        draws, moves = rng.random(n), rng.random(n)
        for i in range(n):
            lost[i] |= draws[i] < (model.loss_in_bad if bad else model.loss_in_good)
            bad = (moves[i] >= model.to_good) if bad else (moves[i] < model.to_bad)
    for ratio in bernoulli:
        lost |= rng.random(n) < ratio
    return lost


def measured(lost: np.ndarray) -> tuple[float, float]:
    """(loss rate, mean run of consecutive losses)."""
    edges = np.diff(np.concatenate([[0], lost.astype(np.int8), [0]]))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    return float(lost.mean()), float(runs.mean())


def test_a_rate_with_a_burst_is_that_rate_in_runs_of_that_length():
    model = LossModel.bursts(0.01, 3)
    assert model == LossModel(pytest.approx(0.01 / 3 / 0.99, rel=1e-12), 1 / 3, 1.0, 0.0)
    assert model.rate == pytest.approx(0.01, abs=1e-15)
    assert model.mean_burst() == pytest.approx(3.0, abs=1e-12)


def test_a_correlation_is_the_lag_one_correlation_of_losses():
    model = LossModel.correlated(0.02, 0.25)
    assert model.rate == pytest.approx(0.02, abs=1e-15)
    # P(loss | loss) = p + rho (1 - p); a run lasts 1 / (1 - that) packets.
    assert model.mean_burst() == pytest.approx(1 / (1 - (0.02 + 0.25 * 0.98)), rel=1e-12)
    assert LossModel.correlated(0.02, 0.0).mean_burst() == pytest.approx(1 / 0.98, rel=1e-12)


def test_a_gilbert_elliott_chain_has_its_stationary_figures():
    model = LossModel(to_bad=0.01, to_good=0.2, loss_in_bad=0.5, loss_in_good=0.001)
    bad = 0.01 / 0.21
    assert model.bad_share == pytest.approx(bad)
    assert model.rate == pytest.approx((1 - bad) * 0.001 + bad * 0.5)
    rate, burst = measured(simulate([model], [], 400_000))
    assert rate == pytest.approx(model.rate, rel=0.06)
    assert burst == pytest.approx(model.mean_burst(), rel=0.05)


def test_bernoulli_links_compose_to_bernoulli():
    assert compose_loss([(0.1, None), (0.2, None)]) == (0.28, None)
    assert compose_loss([]) == (0.0, None)


def test_one_bursty_link_keeps_its_chain_with_the_other_links_folded_in():
    chain = LossModel.bursts(0.02, 4)
    loss, model = compose_loss([(0.01, None), (chain.rate, chain), (0.03, None)])
    assert loss == pytest.approx(1 - 0.99 * 0.98 * 0.97, abs=1e-12)
    assert model == LossModel(chain.to_bad, chain.to_good, 1.0, pytest.approx(1 - 0.99 * 0.97))
    assert model.rate == pytest.approx(loss, abs=1e-12)


def test_several_bursty_links_keep_the_path_rate_and_mean_burst():
    """The composed chain's rate and mean burst are those of the real union
    of losses: computed exactly, and measured on a simulated path."""
    a, b = LossModel.bursts(0.02, 4), LossModel(0.005, 0.25, 0.8, 0.001)
    loss, model = compose_loss([(a.rate, a), (0.01, None), (b.rate, b)])
    keep = (1 - a.rate) * 0.99 * (1 - b.rate)
    pair_keep = a.pair_keep() * 0.99**2 * b.pair_keep()
    assert loss == pytest.approx(1 - keep, abs=1e-12)
    assert model.rate == pytest.approx(1 - keep, rel=1e-12)
    assert model.mean_burst() == pytest.approx(burst_of(1 - keep, 1 - 2 * keep + pair_keep), rel=1e-12)
    rate, burst = measured(simulate([a, b], [0.01], 600_000))
    assert rate == pytest.approx(model.rate, rel=0.05)
    assert burst == pytest.approx(model.mean_burst(), rel=0.05)
    assert 2.0 < model.mean_burst() < 4.0  # burstier than Bernoulli, less than the burstiest link


def test_reorder_corrupt_and_duplicate_compose_per_packet():
    assert compose_reorder([0.01, 0.02]) == pytest.approx(1 - 0.99 * 0.98, abs=1e-12)
    assert compose_duplicate([0.1, 0.2]) == pytest.approx(1.1 * 1.2 - 1, abs=1e-12)
    assert compose_duplicate([0.8, 0.5]) == 1.0  # one copy per packet at most


def test_a_path_keeps_order_when_every_jittery_link_does():
    keep, free = Extras(in_order=True), Extras(in_order=False)
    assert compose([(0.0, 2000, None, keep), (0.0, 0, None, free)])[1].in_order is True
    assert compose([(0.0, 2000, None, keep), (0.0, 1000, None, free)])[1].in_order is False
    assert compose([(0.0, 2000, None, NO_EXTRAS)], in_order=True)[1].in_order is True
    assert compose([(0.0, 2000, None, free)], in_order=True)[1].in_order is False
    assert compose([(0.0, 0, None, keep)])[1].in_order is False  # no jitter: nothing to keep in order


def test_a_path_has_its_bottleneck_queue():
    fast, slow = Extras(queue=Queue(packets=500)), Extras(queue=Queue(time_us=20_000))
    links = [(0.0, 0, 100_000_000, fast), (0.0, 0, 10_000_000, slow), (0.0, 0, None, fast)]
    assert compose(links)[1].queue == Queue(packets=17)  # 20 ms at 10 Mbit/s: 25,000 bytes
    assert compose([(0.0, 0, 10_000_000, NO_EXTRAS), (0.0, 0, 100_000_000, fast)])[1].queue is None
    # a tie: the first link on the path
    assert compose([(0.0, 0, 10_000_000, fast), (0.0, 0, 10_000_000, slow)])[1].queue == Queue(packets=500)


def test_a_queue_in_time_is_packets_at_the_rate():
    assert Queue(time_us=20_000).packets_at(10_000_000, 1514) == 17  # 25,000 bytes
    assert Queue(time_us=1).packets_at(1_000_000, 1514) == 1
    # And back: 25 frames of 1514 bytes take 30.28 ms at 10 Mbit/s; a time is itself.
    assert Queue(packets=25).time_us_at(10_000_000, 1514) == 30_280
    assert Queue(time_us=20_000).time_us_at(10_000_000, 1514) == 20_000
    assert Queue(packets=64).packets_at(10_000_000, 1514) == 64


def test_congestion_loss_thins_a_chain():
    chain = LossModel.bursts(0.02, 4)
    loss, extras = with_loss(chain.rate, Extras(loss_model=chain, reorder_ratio=0.01), 0.1)
    assert loss == pytest.approx(1 - 0.98 * 0.9, abs=1e-12)
    assert extras.loss_model is not None and extras.loss_model.rate == pytest.approx(loss, abs=1e-12)
    assert extras.reorder_ratio == 0.01


def test_signatures_name_the_values():
    assert NO_EXTRAS.signature() == 0
    one, other = Extras(reorder_ratio=0.01), Extras(reorder_ratio=0.02)
    assert one.signature() == Extras(reorder_ratio=0.01).signature() != other.signature()
    assert 0 < one.signature() < 2**63
