"""Event semantics: order, resolved targets, sugar, link orientation."""

import random

import pytest

from collapsar.errors import TopologyError, Where
from collapsar.model import BridgeEvent, LinkEvent, LinkProps, LinkSetEvent, LinkSpec, PartitionEvent, ServiceEvent
from collapsar.parser import parse_text

BASE = """\
experiment: {seed: SEED}
services:
  web: {command: [x], replicas: 4}
  db: {command: [y]}
bridges: [s1, s2]
links:
  - {from: web, to: s1, latency: 10ms}
  - {from: db, to: s1, latency: 1ms}
  - {from: s1, to: s2, latency: 5ms, up: 10Mbps, down: 2Mbps}
  - {from: s2, to: db, latency: 1ms, direction: one-way}
events:
"""  # events start at line 12


def events(*lines: str, seed: int = 1):
    text = BASE.replace("SEED", str(seed)) + "".join(f"  - {line}\n" for line in lines)
    return parse_text(text, "t.yaml").events


def summary(evs):
    """(seconds, action, targets) of service events, for compact asserts."""
    return [(e.at_us // 10**6, e.action, e.targets) for e in evs]


def test_join_takes_the_next_free_indices_and_never_reuses_one():
    evs = events(
        "{at: 1s, instance: web-4, action: crash}",
        "{at: 2s, service: web, action: join}",
        "{at: 3s, service: web, action: join, amount: 2}",
        "{at: 4s, service: db, action: leave}",
        "{at: 5s, service: db, action: join}",
    )
    assert summary(evs) == [
        (1, "crash", ("web-4",)),
        (2, "join", ("web-5",)),
        (3, "join", ("web-6", "web-7")),
        (4, "leave", ("db",)),
        (5, "join", ("db-2",)),
    ]
    assert evs[0] == ServiceEvent(1_000_000, "web", "crash", ("web-4",), Where("t.yaml", 12))


def test_defaults_act_on_every_eligible_instance():
    evs = events(
        "{at: 1s, instance: [web-2, web-3], action: disconnect}",
        "{at: 2s, service: web, action: disconnect}",
        "{at: 3s, service: web, action: reconnect}",
        "{at: 4s, instance: web, action: leave}",
        "{at: 5s, service: web, action: crash}",
    )
    assert summary(evs) == [
        (1, "disconnect", ("web-2", "web-3")),
        (2, "disconnect", ("web", "web-4")),
        (3, "reconnect", ("web", "web-2", "web-3", "web-4")),
        (4, "leave", ("web",)),
        (5, "crash", ("web-2", "web-3", "web-4")),
    ]


def test_a_disconnected_instance_can_still_leave():
    evs = events(
        "{at: 1s, instance: web-2, action: disconnect}",
        "{at: 2s, instance: web-2, action: leave}",
        "{at: 3s, service: web, action: disconnect}",
    )
    assert summary(evs)[1:] == [(2, "leave", ("web-2",)), (3, "disconnect", ("web", "web-3", "web-4"))]


def test_reconnect_after_the_disconnected_instance_left_is_rejected():
    with pytest.raises(TopologyError) as error:
        events(
            "{at: 1s, instance: web-2, action: disconnect}",
            "{at: 2s, instance: web-2, action: leave}",
            "{at: 3s, service: web, action: reconnect}",
        )
    assert error.value.lines() == ["t.yaml:14: service web: cannot reconnect at 3s: no instance of web is disconnected"]


def test_amount_is_drawn_from_the_seed():
    def chosen(seed):
        return events("{at: 1s, service: web, action: crash, amount: 2}", seed=seed)[0].targets

    eligible = ["web", "web-2", "web-3", "web-4"]
    for seed in (1, 2, 3):
        picked = set(random.Random(seed).sample(eligible, 2))
        assert chosen(seed) == tuple(name for name in eligible if name in picked)
    assert chosen(1) == chosen(1)
    assert len({chosen(seed) for seed in range(10)}) > 1  # the seed matters


def test_amount_does_not_depend_on_unrelated_events():
    plain = events("{at: 5s, service: web, action: leave, amount: 3}", seed=9)
    busy = events(
        "{at: 1s, bridge: s2, action: leave}",
        "{at: 2s, service: db, action: leave}",
        "{at: 3s, link: [web, s1], set: {latency: 20ms}}",
        "{at: 5s, service: web, action: leave, amount: 3}",
        seed=9,
    )
    assert plain[0].targets == busy[-1].targets


def test_amount_equal_to_all_takes_all():
    evs = events("{at: 1s, service: web, action: leave, amount: 4}")
    assert evs[0].targets == ("web", "web-2", "web-3", "web-4")


def test_events_are_sorted_by_time_stable_in_file_order():
    evs = events(
        "{at: 2s, bridge: s2, action: leave}",
        "{at: 1s, instance: web-3, action: crash}",
        "{at: 2s, bridge: s2, action: join}",
        "{at: 1s, instance: web-2, action: crash}",
    )
    assert [(e.at_us, getattr(e, "targets", e.action)) for e in evs] == [
        (1_000_000, ("web-3",)),
        (1_000_000, ("web-2",)),
        (2_000_000, "leave"),
        (2_000_000, "join"),
    ]
    assert isinstance(evs[2], BridgeEvent) and evs[2].bridge == "s2"


def test_flap_expands_into_alternating_leave_and_join():
    evs = events("{at: 5s, link: [s1, s2], flap: {every: 2s, until: 13s}}")
    assert [(e.at_us // 10**6, e.action) for e in evs] == [(5, "leave"), (7, "join"), (9, "leave"), (11, "join")]
    assert all(isinstance(e, LinkEvent) and (e.a, e.b) == ("s1", "s2") for e in evs)


def test_flap_always_ends_with_the_link_up():
    evs = events("{at: 5s, link: [s1, s2], flap: {every: 2s, until: 10s}}")
    assert [(e.at_us // 10**6, e.action) for e in evs] == [(5, "leave"), (7, "join"), (9, "leave"), (10, "join")]


def test_partition_with_until_starts_and_heals():
    evs = events(
        "{at: 50s, partition: [[web], [db]], until: 1m}",
        "{at: 70s, partition: [web, db]}",
        "{at: 80s, partition: [db, web], action: heal}",
    )
    groups = (frozenset({"web"}), frozenset({"db"}))
    assert evs[:2] == (
        PartitionEvent(50_000_000, groups, "start", Where("t.yaml", 12)),
        PartitionEvent(60_000_000, groups, "heal", Where("t.yaml", 12)),
    )
    assert [e.action for e in evs[2:]] == ["start", "heal"]


def test_set_bandwidth_changes_both_directions():
    (ev,) = events("{at: 1s, link: [s1, s2], set: {latency: 20ms, bandwidth: 5Mbps, loss: 1%}}")
    both = {"delay_us": 20_000, "loss_ratio": 0.01, "loss_model": None, "rate_bps": 5_000_000}
    assert ev == LinkSetEvent(1_000_000, "s1", "s2", both, both, Where("t.yaml", 12))


def test_set_up_and_down_follow_the_order_written_in_the_event():
    forward, backward = events(
        "{at: 1s, link: [s1, s2], set: {up: 1Mbps}}", "{at: 2s, link: [s2, s1], set: {up: 3Mbps, down: 4Mbps}}"
    )
    assert (forward.a, forward.b, forward.up, forward.down) == ("s1", "s2", {"rate_bps": 1_000_000}, {})
    # Normalised to the link's own orientation (s1 -> s2): written up is s2 -> s1.
    assert (backward.a, backward.b, backward.up, backward.down) == (
        "s1",
        "s2",
        {"rate_bps": 4_000_000},
        {"rate_bps": 3_000_000},
    )


def test_set_on_a_one_way_link_has_no_down():
    (ev,) = events("{at: 1s, link: [s2, db], set: {bandwidth: 1Mbps, jitter: 1ms}}")
    assert (ev.up, ev.down) == ({"rate_bps": 1_000_000, "jitter_us": 1000}, {})


def test_later_sets_see_earlier_ones():
    evs = events("{at: 1s, link: [web, s1], set: {latency: 30ms}}", "{at: 2s, link: [web, s1], set: {jitter: 20ms}}")
    assert evs[1].up == {"jitter_us": 20_000}


def test_link_events_use_the_link_orientation():
    evs = events("{at: 1s, link: [s1, web], action: leave}", "{at: 2s, link: [s1, web], action: join}")
    assert [(e.a, e.b, e.action, e.spec) for e in evs] == [("web", "s1", "leave", None), ("web", "s1", "join", None)]


def test_a_join_with_properties_creates_a_link_that_later_events_know():
    evs = events(
        "{at: 1s, link: [web, s2], action: join, latency: 3ms, up: 10Mbps, direction: one-way}",
        "{at: 2s, link: [web, s2], set: {up: 20Mbps}}",
        "{at: 3s, link: [web, s2], action: leave}",
    )
    spec = LinkSpec("web", "s2", LinkProps(3000, rate_bps=10_000_000), None, Where("t.yaml", 12))
    assert evs[0] == LinkEvent(1_000_000, "web", "s2", "join", spec, Where("t.yaml", 12))
    assert evs[1].up == {"rate_bps": 20_000_000} and evs[1].down == {}
    assert evs[2].action == "leave"


def test_bridge_leave_and_rejoin():
    evs = events(
        "{at: 1s, bridge: s2, action: leave}",
        "{at: 2s, bridge: s2, action: join}",
        "{at: 3s, bridge: s2, action: leave}",
    )
    assert [(e.bridge, e.action) for e in evs] == [("s2", "leave"), ("s2", "join"), ("s2", "leave")]


def test_a_service_with_no_replicas_joins_later():
    text = BASE.replace("SEED", "0").replace("{command: [y]}", "{command: [y], replicas: 0}")
    evs = parse_text(text + "  - {at: 1s, service: db, action: join, amount: 2}\n").events
    assert evs[0].targets == ("db", "db-2")
