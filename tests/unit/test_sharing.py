"""The RTT-aware min-max model: hand-computed tables, then max-min invariants."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collapsar.manager.sharing import model
from collapsar.manager.sharing.model import Flow, SharingInputError, congestion_loss, rtt_exponent, share

M = 1_000_000
GREEDY = 100 * M  # a demand above every capacity in the tables


def flow(fid, links, rtt_ms, demand=GREEDY, path=None):
    return Flow(fid, tuple(links), rtt_ms * 1000, path, demand)


# (name, flows, link capacities, expected rates, expected link loss)
CASES = [
    (
        "rtt 10 and 20 ms on 30 Mbit/s",
        [flow("a", [1], 10, 20 * M), flow("b", [1], 20, 10 * M)],
        {1: 30 * M},
        {"a": 20 * M, "b": 10 * M},
        {},
    ),
    (
        "equal rtt splits evenly",
        [flow("a", [1], 10, 20 * M), flow("b", [1], 10, 20 * M), flow("c", [1], 10, 20 * M)],
        {1: 30 * M},
        {"a": 10 * M, "b": 10 * M, "c": 10 * M},
        {1: 0.5},
    ),
    (
        "1/RTT weights 4:2:1",
        [flow("a", [1], 10), flow("b", [1], 20), flow("c", [1], 40)],
        {1: 35 * M},
        {"a": 20 * M, "b": 10 * M, "c": 5 * M},
        {1: 1 - 35 / 300},
    ),
    (
        "a client stops: the others take its share",
        [flow("b", [1], 20), flow("c", [1], 40)],
        {1: 35 * M},
        {"b": 23_333_333, "c": 11_666_667},
        {1: 1 - 35 / 200},
    ),
    (
        "limited elsewhere: keeps its rate, the rest goes to the others",
        [flow("a", [1, 2], 10, 4 * M), flow("b", [1], 10, 30 * M), flow("c", [1], 10, 30 * M)],
        {1: 30 * M, 2: 4 * M},
        {"a": 4 * M, "b": 13 * M, "c": 13 * M},
        {1: 34 / 64},
    ),
    (
        "slower access link (path capacity) keeps its rate",
        [flow("a", [1], 10, 6 * M, path=6 * M), flow("b", [1], 20, 30 * M), flow("c", [1], 20, 30 * M)],
        {1: 30 * M},
        {"a": 6 * M, "b": 12 * M, "c": 12 * M},
        {1: 36 / 66},
    ),
    (
        "demand below its share: spare lent, own share kept to grow into",
        [flow("a", [1], 10, 5 * M), flow("b", [1], 20, 25 * M)],
        {1: 30 * M},
        {"a": 20 * M, "b": 25 * M},
        {},
    ),
    (
        "three links in a chain",
        [flow("f1", [1, 2, 3], 10), flow("f2", [1], 40), flow("f3", [2], 20), flow("f4", [3], 10)],
        {1: 10 * M, 2: 20 * M, 3: 30 * M},
        {"f1": 8 * M, "f2": 2 * M, "f3": 12 * M, "f4": 22 * M},
        {1: 190 / 200, 2: 180 / 200, 3: 170 / 200},
    ),
    (
        "oversubscribed UDP senders: loss in proportion to the excess",
        [flow("u1", [7], 10, 20 * M), flow("u2", [7], 10, 20 * M), flow("u3", [7], 10, 20 * M)],
        {7: 30 * M},
        {"u1": 10 * M, "u2": 10 * M, "u3": 10 * M},
        {7: 0.5},
    ),
    (
        "unlimited links and path: nothing limits the flow",
        [flow("a", [1, 2], 10, 5 * M)],
        {1: None, 2: None},
        {"a": None},
        {},
    ),
    (
        "unlimited link inside a limited path",
        [flow("a", [1, 2], 10, 50 * M), flow("b", [2], 30, 50 * M)],
        {1: None, 2: 40 * M},
        {"a": 30 * M, "b": 10 * M},
        {2: 60 / 100},
    ),
]


@pytest.mark.parametrize("name,flows,links,rates,loss", CASES, ids=[c[0] for c in CASES])
def test_table(name, flows, links, rates, loss):
    result = share(flows, links)
    assert result.rate_bps == rates
    assert result.link_loss_ratio == pytest.approx(loss)
    assert set(result.link_loss_ratio) == set(loss)


@pytest.mark.parametrize(
    ("exponent", "near", "far"),
    [
        (1.0, 8 * M, 2 * M),  # 1/RTT: 4:1
        (0.5, 6_666_667, 3_333_333),  # 2:1
        (0.0, 5 * M, 5 * M),  # RTT does not matter
        (-0.5, 3_333_333, 6_666_667),  # the longer RTT gets more
    ],
)
def test_rtt_weights_follow_the_exponent(exponent, near, far):
    flows = [flow("near", [1], 20), flow("far", [1], 80)]
    assert share(flows, {1: 10 * M}, exponent).rate_bps == {"near": near, "far": far}


def test_the_exponent_is_the_experiments_control_or_the_hosts_default(monkeypatch):
    assert (rtt_exponent("reno"), rtt_exponent("cubic"), rtt_exponent("bbr")) == (0.55, 0.47, -0.46)
    monkeypatch.setattr(model, "host_congestion_control", lambda: "bbr")
    assert rtt_exponent(None) == model.RTT_EXPONENT["bbr"]
    monkeypatch.setattr(model, "host_congestion_control", lambda: "htcp")
    assert rtt_exponent(None) == model.UNMEASURED_RTT_EXPONENT == 0.55  # Reno's


def test_flow_loss_compounds_over_oversubscribed_links():
    result = share(
        [flow("f1", [1, 2], 10, 40 * M), flow("f2", [1], 10, 40 * M), flow("f3", [2], 10, 10 * M)],
        {1: 40 * M, 2: 25 * M},
    )
    # link 1: 80 offered on 40 -> 0.5; link 2: 50 offered on 25 -> 0.5.
    assert result.link_loss_ratio == pytest.approx({1: 0.5, 2: 0.5})
    assert result.flow_loss_ratio == pytest.approx({"f1": 0.75, "f2": 0.5, "f3": 0.5})
    # f3 wants 10 of link 2's 25, f1 gets the other 15 (below half of link 1), f2 the rest.
    assert result.rate_bps == {"f1": 15 * M, "f2": 25 * M, "f3": 12_500_000}


def test_converged_state_is_a_fixed_point():
    # Flows that use exactly what the model gave them get the same answer back.
    first = share([flow("a", [1], 10), flow("b", [1], 20)], {1: 30 * M})
    again = share([flow("a", [1], 10, first.rate_bps["a"]), flow("b", [1], 20, first.rate_bps["b"])], {1: 30 * M})
    assert again.rate_bps == first.rate_bps == {"a": 20 * M, "b": 10 * M}
    assert again.link_loss_ratio == {}


def test_no_flows():
    result = share([], {1: M})
    assert (result.rate_bps, result.link_loss_ratio, result.flow_loss_ratio) == ({}, {}, {})


@pytest.mark.parametrize(
    "flows,links,message",
    [
        ([flow("a", [9], 10)], {1: M}, "flow 'a': link 9 has no entry"),
        ([flow("a", [1], 10), flow("a", [1], 10)], {1: M}, "flow 'a': the same flow id appears twice"),
        ([Flow("a", (1,), 0, None, M)], {1: M}, "flow 'a': rtt_us must be above zero, got 0"),
        ([Flow("a", (1,), 10, None, -1)], {1: M}, "demand_bps must not be negative, got -1"),
        ([Flow("a", (1,), 10, 0, 1)], {1: M}, "path_rate_bps must be above zero, got 0"),
        ([flow("a", [1, 1], 10)], {1: M}, "one of them twice"),
        ([flow("a", [1], 10)], {1: 0}, "link 1: capacity must be above zero, got 0 bps"),
    ],
)
def test_rejects_bad_input(flows, links, message):
    with pytest.raises(SharingInputError, match=message):
        share(flows, links)


# ---- invariants on random instances ------------------------------------------


@st.composite
def instances(draw):
    n_links = draw(st.integers(1, 6))
    links = {i: draw(st.sampled_from([None, 1 * M, 5 * M, 10 * M, 30 * M, 100 * M])) for i in range(n_links)}
    flows = []
    for i in range(draw(st.integers(1, 12))):
        path = draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True))
        flows.append(
            Flow(
                i,
                tuple(path),
                draw(st.integers(1, 400)) * 1000,
                draw(st.sampled_from([None, 2 * M, 20 * M])),
                draw(st.integers(0, 120)) * M,
            )
        )
    return flows, links


@settings(max_examples=200, deadline=None)
@given(instances())
def test_weighted_max_min_invariants(instance):
    flows, links = instance
    rates = share(flows, links).rate_bps
    inf = float("inf")
    # What a flow actually gets: its rate, or less when it wants less.
    got = {f.flow_id: min(inf if rates[f.flow_id] is None else rates[f.flow_id], f.demand_bps) for f in flows}
    load = {}
    for f in flows:
        for link in f.link_ids:
            load[link] = load.get(link, 0) + got[f.flow_id]
    for link, cap in links.items():
        if cap is not None and link in load:
            assert load[link] <= cap + len(flows), f"link {link} carries {load[link]} > {cap}"
    for f in flows:
        limit = min(f.demand_bps, f.path_rate_bps or inf)
        if got[f.flow_id] >= limit - 1:
            continue

        # Not at its own limit: some full link must be its bottleneck, where no
        # other flow has a larger share per unit of weight (1/RTT); rounding
        # rates to whole bps moves got * rtt by up to rtt / 2 per flow.
        def per_weight(g):
            return got[g.flow_id] * g.rtt_us

        bottlenecks = [
            link
            for link in f.link_ids
            if links[link] is not None
            and load[link] >= links[link] - len(flows)
            and all(
                per_weight(g) <= per_weight(f) * (1 + 1e-6) + g.rtt_us + f.rtt_us for g in flows if link in g.link_ids
            )
        ]
        assert bottlenecks, f"flow {f.flow_id} gets {got[f.flow_id]} below {limit} without a bottleneck"


def test_order_of_flows_does_not_matter():
    rng = random.Random(7)
    flows = [
        Flow(
            i,
            tuple(rng.sample(range(20), rng.randint(1, 4))),
            rng.randint(1, 200) * 1000,
            rng.choice([None, 10 * M]),
            rng.randint(0, 50) * M,
        )
        for i in range(200)
    ]
    links = {i: rng.choice([None, 20 * M, 100 * M]) for i in range(20)}
    expected = share(flows, links)
    rng.shuffle(flows)
    again = share(flows, links)
    assert again.rate_bps == expected.rate_bps
    assert again.link_loss_ratio == pytest.approx(expected.link_loss_ratio)


# ---- congestion loss charged to the flows above their share ----------------------


def test_congestion_loss_spares_a_flow_within_its_share():
    flows = [flow("u1", [7], 10), flow("u2", [7], 10), flow("t", [7], 10)]
    allowed = {"u1": 10 * M, "u2": 10 * M, "t": 10 * M}
    # Two UDP senders offer 20 each, TCP keeps to its 10: 50 on 30, 20 too many.
    links, loss = congestion_loss(flows, {"u1": 20 * M, "u2": 20 * M, "t": 10 * M}, allowed, {7: 30 * M})
    assert links == pytest.approx({7: 0.4})
    assert loss == pytest.approx({"u1": 0.5, "u2": 0.5})


def test_congestion_loss_drop_tail_when_nobody_is_above_its_share():
    flows = [flow("a", [1], 10), flow("b", [1], 10)]
    links, loss = congestion_loss(flows, {"a": 12 * M, "b": 12 * M}, {"a": 15 * M, "b": 15 * M}, {1: 20 * M})
    assert links == pytest.approx({1: 1 / 6}) and loss == pytest.approx({"a": 1 / 6, "b": 1 / 6})


def test_congestion_loss_compounds_and_ignores_unlimited_links():
    flows = [flow("f", [1, 2, 3], 10), flow("g", [1], 10), flow("h", [2], 10)]
    offered = {"f": 20 * M, "g": 20 * M, "h": 20 * M}
    allowed = {"f": 10 * M, "g": 10 * M, "h": 10 * M}
    links, loss = congestion_loss(flows, offered, allowed, {1: 30 * M, 2: 20 * M, 3: None})
    # link 1: 10 too many, f and g 10 over each: 5/20 each; link 2: 20 too many: 10/20 each.
    assert links == pytest.approx({1: 0.25, 2: 0.5})
    assert loss == pytest.approx({"f": 1 - 0.75 * 0.5, "g": 0.25, "h": 0.5})
    assert congestion_loss(flows, {"f": M, "g": M, "h": M}, allowed, {1: 30 * M, 2: 20 * M, 3: None}) == ({}, {})


def test_congestion_loss_forgives_measurement_noise():
    flows = [flow("u", [7], 10), flow("t", [7], 10)]
    allowed = {"u": 10 * M, "t": 10 * M}
    # t overshoots its class by 5% (TCP's sawtooth in a window): not charged.
    links, loss = congestion_loss(flows, {"u": 20 * M, "t": 10_500_000}, allowed, {7: 20 * M}, tolerance=0.1)
    assert links == pytest.approx({7: 10.5 / 30.5})
    assert loss == pytest.approx({"u": 9 / 20})  # over 11 by 9, 10.5 too many in all: all 9 charged
    # 5% over capacity in all is noise too: no loss anywhere.
    assert congestion_loss(flows, {"u": 10_500_000, "t": 10_500_000}, allowed, {7: 20 * M}, tolerance=0.1) == ({}, {})


# ---- full links and their standing queues ------------------------------------------


def test_full_links_name_the_flows_they_hold_back():
    # The Kollaps scenario's stage 5: c1-c3 meet on b1 -> b2 (7), all five on b2 -> b3 (8).
    flows = [
        flow("c1", [1, 7, 8], 60, path=5 * M),
        flow("c2", [2, 7, 8], 50, path=5 * M),
        flow("c3", [3, 7, 8], 50, path=M),
        flow("c4", [4, 8], 40, path=5 * M),
        flow("c5", [5, 8], 30, path=5 * M),
    ]
    caps = {1: 5 * M, 2: 5 * M, 3: M, 4: 5 * M, 5: 5 * M, 7: 5 * M, 8: 10 * M}
    result = share(flows, caps, 0.47)
    # c3 is held by its own access link (3), c1 and c2 by b1 -> b2, c4 and c5
    # by b2 -> b3, which c1-c3 cross without being held there.
    assert result.full_links == {3: {"c3"}, 7: {"c1", "c2"}, 8: {"c4", "c5"}}
    # A flow that wants less than its share fills nothing.
    assert share([flow("a", [1], 10, 2 * M), flow("b", [1], 10, 3 * M)], {1: 10 * M}).full_links == {}
    # Unlimited links are never full.
    assert share([flow("a", [1], 10)], {1: None}).full_links == {}


def test_a_full_links_standing_queue_is_a_part_of_its_buffer():
    flows = [flow("a", [1, 2], 60), flow("b", [2], 10), flow("c", [3], 4), flow("d", [3], 4)]
    full = {1: frozenset({"a"}), 2: frozenset({"b"}), 3: frozenset({"c", "d"})}
    queue = model.StandingQueue(0.5, 0.9)
    # Link 1: its own queue, 40 ms; link 2: the longest round trip across it
    # (a's 60 ms); link 3: 4 ms, below the 20 ms floor, and two flows fill it:
    # 0.9 - 0.4 / 2 = 0.7 of its buffer.
    assert model.standing_queues(flows, full, {1: 40_000}, queue) == {1: 20_000, 2: 30_000, 3: 14_000}
    assert model.standing_queues(flows, {}, {}, queue) == {}
    assert [queue.part(n) for n in (1, 2, 4)] == pytest.approx([0.5, 0.7, 0.8])
    assert model.StandingQueue(0.4, 1.2).part(4) == 1.0  # never more than the whole buffer


def test_a_full_links_drops_follow_the_flows_that_fill_it():
    queue = model.StandingQueue(0.5, 0.9, ((1, 0.02), (2, 0.06), (4, 0.16)))
    # Measured at 1, 2 and 4 flows: straight between them (3: halfway from 2
    # to 4), the nearest count's ratio outside them.
    assert [queue.drop(n) for n in (0, 1, 2, 3, 4, 9)] == pytest.approx([0.02, 0.02, 0.06, 0.11, 0.16, 0.16])
    assert model.StandingQueue(0.5, 0.9, ((1, 0.007),)).drop(5) == 0.007  # one count: the same for any
    assert model.StandingQueue(0.5, 0.9).drop(3) == 0.0  # none measured: no drops
    full = {1: frozenset({"a"}), 3: frozenset({"c", "d", "e"})}
    assert model.full_queue_drops(full, queue) == pytest.approx({1: 0.02, 3: 0.11})
    assert model.full_queue_drops(full, model.StandingQueue(0.5, 0.9)) == {}
    # The measured ratios: Reno's and CUBIC's one figure for any count, BBR's growing with it.
    assert [model.STANDING_QUEUE[c].drop(2) for c in ("reno", "cubic", "bbr")] == [0.015, 0.0045, 0.064]
    assert model.STANDING_QUEUE["bbr"].drop(3) == pytest.approx(0.118)


def test_the_standing_queue_follows_the_congestion_control():
    assert [model.standing_queue(c) for c in ("reno", "cubic", "bbr", "vegas")] == [
        model.STANDING_QUEUE["reno"],
        model.STANDING_QUEUE["cubic"],
        model.STANDING_QUEUE["bbr"],
        model.UNMEASURED_STANDING_QUEUE,
    ]
