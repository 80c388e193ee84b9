"""The timeline: steps, states after events, and the changed pairs of each step."""

import pathlib
import sys

import numpy as np
import pytest

from collapsar.collapse import NetworkState
from collapsar.errors import CollapsarError, TopologyError
from collapsar.model import (
    Bridge,
    BridgeEvent,
    Experiment,
    LinkEvent,
    LinkProps,
    LinkSetEvent,
    LinkSpec,
    PartitionEvent,
    Service,
    ServiceEvent,
    Settings,
)
from collapsar.parser import parse_text
from collapsar.routing import Router
from collapsar.timeline import ChangedPairs, build_timeline

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from scalefree import generate  # noqa: E402

S = 1_000_000


def p(delay_ms, rate=None):
    return LinkProps(delay_us=int(delay_ms * 1000), rate_bps=rate)


def star(events, replicas=2):
    """client x replicas and server on s1; s1 - s2 direct (10ms) or via s3 (2 x 8ms)."""
    return Experiment(
        Settings("t"),
        (Service("client", replicas=replicas), Service("server")),
        (Bridge("s1"), Bridge("s2"), Bridge("s3")),
        (
            LinkSpec("client", "s1", p(1, 10**8), p(1, 10**8)),
            LinkSpec("s1", "s2", p(10, 10**7), p(10, 10**7)),
            LinkSpec("s1", "s3", p(8), p(8)),
            LinkSpec("s3", "s2", p(8), p(8)),
            LinkSpec("s2", "server", p(1, 10**9), p(1, 10**9)),
        ),
        tuple(events),
    )


def delays(state):
    return {(path.src, path.dst): path.delay_us for path in state.paths()}


ALL_PAIRS = {
    ("client", "client-2"),
    ("client", "server"),
    ("client-2", "client"),
    ("client-2", "server"),
    ("server", "client"),
    ("server", "client-2"),
}
TO_SERVER = {("client", "server"), ("client-2", "server"), ("server", "client"), ("server", "client-2")}


def test_steps_group_events_by_time_and_step_zero_has_everything():
    exp = star(
        [
            LinkSetEvent(2 * S, "s1", "s2", {"delay_us": 30000}, {}),
            LinkSetEvent(2 * S, "s1", "s2", {"rate_bps": 10**6}, {}),
            LinkEvent(5 * S, "s1", "s2", "leave"),
        ]
    )
    timeline = build_timeline(exp)
    assert [(s.at_us, len(s.events)) for s in timeline.steps] == [(0, 0), (2 * S, 2), (5 * S, 1)]
    assert set(timeline.steps[0].changed) == ALL_PAIRS
    # 30ms direct now loses to 16ms via s3: only the client -> server way changes.
    assert set(timeline.steps[1].changed) == {("client", "server"), ("client-2", "server")}
    assert delays(timeline.steps[1].state)[("client", "server")] == 18000
    assert delays(timeline.steps[1].state)[("server", "client")] == 12000
    assert set(timeline.steps[2].changed) == {("server", "client"), ("server", "client-2")}
    assert timeline.state_at(0) is timeline.steps[0].state
    assert timeline.state_at(2 * S - 1) is timeline.steps[0].state
    assert timeline.state_at(3 * S) is timeline.steps[1].state
    assert timeline.state_at(10**12) is timeline.steps[2].state
    with pytest.raises(ValueError):
        timeline.state_at(-1)


def test_events_at_time_zero_belong_to_step_zero():
    timeline = build_timeline(star([LinkEvent(0, "s1", "s2", "leave")]))
    assert len(timeline.steps) == 1
    assert delays(timeline.steps[0].state)[("client", "server")] == 18000


def test_property_change_off_the_bottleneck_changes_nothing():
    # The path's rate is min(100M, 10M, 1G): a new 500M on client -> s1 keeps 10M.
    exp = star([LinkSetEvent(S, "client", "s1", {"rate_bps": 5 * 10**8}, {})])
    step = build_timeline(exp).steps[1]
    assert len(step.changed) == 0
    assert step.state.path("client", "server").rate_bps == 10**7
    assert step.state.links[0].props.rate_bps == 5 * 10**8


def test_set_written_from_the_other_end_swaps_up_and_down():
    exp = star([LinkSetEvent(S, "s2", "s1", {"rate_bps": 10**6}, {})])
    state = build_timeline(exp).steps[1].state
    assert state.path("server", "client").rate_bps == 10**6
    assert state.path("client", "server").rate_bps == 10**7


def test_disconnect_cuts_both_ways_and_reconnect_restores():
    exp = star(
        [
            ServiceEvent(S, "client", "disconnect", ("client-2",)),
            ServiceEvent(2 * S, "client", "reconnect", ("client-2",)),
        ]
    )
    steps = build_timeline(exp).steps
    state = steps[1].state
    assert state.status("client-2") == "disconnected"
    # No tree moved: the state shares the step before's matrices.
    assert state.in_core is steps[0].state.in_core and state.in_sink is steps[0].state.in_sink
    assert "client-2" in state.instances
    assert state.path("client-2", "server") is None and state.path("server", "client-2") is None
    assert set(steps[1].changed) == {
        ("client", "client-2"),
        ("client-2", "client"),
        ("client-2", "server"),
        ("server", "client-2"),
    }
    assert set(steps[2].changed) == set(steps[1].changed)
    assert steps[2].state.status("client-2") == "up"
    assert delays(steps[2].state) == delays(steps[0].state)


def test_partition_cuts_between_groups_only_until_healed():
    groups = (frozenset({"client"}), frozenset({"server"}))
    exp = star([PartitionEvent(S, groups, "start"), PartitionEvent(3 * S, groups, "heal")])
    steps = build_timeline(exp).steps
    assert set(delays(steps[1].state)) == {("client", "client-2"), ("client-2", "client")}
    assert set(steps[1].changed) == TO_SERVER
    assert set(steps[2].changed) == TO_SERVER
    assert steps[1].state.unreachable() == []  # a cut is not a missing route


def test_heal_without_partition_is_an_error():
    groups = (frozenset({"client"}), frozenset({"server"}))
    with pytest.raises(TopologyError, match="no partition"):
        build_timeline(star([PartitionEvent(S, groups, "heal")]))


def test_leave_crash_and_join_of_instances():
    exp = star(
        [
            ServiceEvent(S, "client", "leave", ("client",)),
            ServiceEvent(2 * S, "client", "join", ("client-3",)),
            ServiceEvent(3 * S, "client", "crash", ("client-2",)),
        ]
    )
    steps = build_timeline(exp).steps
    assert steps[1].state.instances == ("client-2", "server")
    assert steps[2].state.instances == ("client-2", "server", "client-3")
    assert steps[2].state.path("client-3", "server").link_ids == (12, 4, 10)
    assert set(steps[2].changed) == {
        ("client-2", "client-3"),
        ("client-3", "client-2"),
        ("client-3", "server"),
        ("server", "client-3"),
    }
    assert steps[3].state.instances == ("server", "client-3")
    assert len(steps[3].changed) == 4


def test_link_leave_rejoin_and_new_link_with_properties():
    exp = star(
        [
            LinkEvent(S, "s1", "s2", "leave"),
            LinkEvent(2 * S, "s1", "s2", "join"),
            LinkEvent(3 * S, "client", "s2", "join", spec=LinkSpec("client", "s2", p(0.5), p(0.5))),
        ]
    )
    steps = build_timeline(exp).steps
    assert [delays(s.state)[("client", "server")] for s in steps] == [12000, 18000, 12000, 1500]
    assert steps[3].state.path("client-2", "server").link_ids == (14, 10)
    assert steps[0].state.links[14].present is False
    assert steps[3].state.links[14].present is True


def test_bridge_leave_and_join():
    exp = star([BridgeEvent(S, "s2", "leave"), BridgeEvent(2 * S, "s2", "join")])
    steps = build_timeline(exp).steps
    assert set(delays(steps[1].state)) == {("client", "client-2"), ("client-2", "client")}
    assert steps[1].state.unreachable() == [
        ("client", "server"),
        ("client-2", "server"),
        ("server", "client"),
        ("server", "client-2"),
    ]
    assert delays(steps[2].state) == delays(steps[0].state)


def test_changed_pairs_behave_as_a_set():
    names = ("a", "b", "c")
    changed = ChangedPairs(names, np.array([0, 2]), np.array([[False, True, True], [True, False, False]]))
    assert len(changed) == 3
    assert set(changed) == {("a", "b"), ("a", "c"), ("c", "a")}
    assert ("a", "c") in changed and ("c", "b") not in changed
    assert ("zz", "a") not in changed and "a" not in changed


def _from_scratch(state):
    router = Router(state.graph, state._rows, state.graph.experiment.settings.path_metric)
    router.initial(state.conditions)
    return NetworkState(state.graph, state.conditions, state._rows, *router.snapshot())


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_incremental_steps_equal_recomputing_from_scratch(seed):
    exp = parse_text(generate(60, seed=seed), "scalefree.yaml")
    timeline = build_timeline(exp)
    previous = None
    for step in timeline.steps:
        current = {(path.src, path.dst): path for path in step.state.paths()}
        assert current == {(path.src, path.dst): path for path in _from_scratch(step.state).paths()}
        if previous is not None:
            truth = {pair for pair in current.keys() | previous.keys() if current.get(pair) != previous.get(pair)}
            assert set(step.changed) == truth, step.at_us
        previous = current
    assert sum(len(step.changed) for step in timeline.steps[1:]) > 0


def test_one_hosts_share_sees_the_same_paths():
    exp = parse_text(generate(60, seed=5), "scalefree.yaml")
    names = [service.name for service in exp.services]
    mine = names[::4]
    whole, part = build_timeline(exp), build_timeline(exp, mine)
    for full_step, part_step in zip(whole.steps, part.steps):
        expected = [path for path in full_step.state.paths() if path.src in mine]
        assert list(part_step.state.paths()) == expected
        assert set(part_step.changed) == {pair for pair in full_step.changed if pair[0] in mine}


def test_equal_cost_routes_settle_on_the_lowest_link_id_whatever_the_history():
    # client -> s1, then s1 -> s2 -> s4 or s1 -> s3 -> s4 (s2 -> s4 has the lower
    # ids), s4 -> s5 -> server.  At 1s both routes cost 10ms: the tie goes to s2.
    links = [
        LinkSpec("client", "s1", p(1), p(1)),
        LinkSpec("s2", "s4", p(5), p(5)),
        LinkSpec("s3", "s4", p(5), p(5)),
        LinkSpec("s1", "s2", p(7), p(7)),
        LinkSpec("s1", "s3", p(5), p(5)),
        LinkSpec("s4", "s5", p(1), p(1)),
        LinkSpec("s5", "server", p(1), p(1)),
    ]
    exp = Experiment(
        Settings("t"),
        (Service("client"), Service("server")),
        tuple(Bridge(f"s{i}") for i in range(1, 6)),
        tuple(links),
        (LinkSetEvent(S, "s1", "s2", {"delay_us": 5000}, {}),),
    )
    steps = build_timeline(exp).steps
    assert steps[0].state.path("client", "server").link_ids == (0, 8, 4, 10, 12)
    assert steps[1].state.path("client", "server").link_ids == (0, 6, 2, 10, 12)
    assert steps[1].state.path("client", "server").delay_us == 13000
    assert set(steps[1].changed) == {("client", "server")}


@pytest.mark.parametrize(
    "event, message",
    [
        (LinkSetEvent(S, "a", "b", {}, {"delay_us": 5}), "one-way: nothing to set from b to a"),
        (LinkSetEvent(S, "a", "b", {"latency": 5}, {}), "cannot set 'latency'"),
        (LinkSetEvent(S, "a", "zz", {"delay_us": 5}, {}), "no such link at this time"),
        (LinkEvent(S, "zz", "b", "leave"), "no such link at this time"),
    ],
)
def test_bad_link_events_name_the_problem(event, message):
    exp = Experiment(Settings("t"), (Service("a"), Service("b")), (), (LinkSpec("a", "b", p(1), None),), (event,))
    with pytest.raises(TopologyError, match=message):
        build_timeline(exp)


def test_cut_off_names_the_instances_no_one_reaches():
    groups = (frozenset({"client"}), frozenset({"server"}))
    exp = star(
        [
            ServiceEvent(S, "client", "disconnect", ("client-2",)),
            PartitionEvent(2 * S, groups, "start"),
            ServiceEvent(3 * S, "client", "leave", ("client",)),
            ServiceEvent(4 * S, "client", "join", ("client-3",)),
        ]
    )
    steps = build_timeline(exp).steps
    everyone = ("client", "client-2", "client-3", "server")
    assert steps[0].state.cut_off(everyone) == {"client-3"}  # not there yet
    assert steps[1].state.cut_off(everyone) == {"client-2", "client-3"}  # disconnected
    # The partition leaves client and server each without the other; client
    # still reaches nobody else (client-2 is disconnected): cut off too.
    assert steps[2].state.cut_off(everyone) == {"client", "client-2", "client-3", "server"}
    assert steps[2].state.cut_off(["client-2"]) == {"client-2"}
    assert steps[3].state.cut_off(everyone) == {"client", "client-2", "client-3", "server"}
    assert steps[0].state.cut_off([]) == set()
    with pytest.raises(CollapsarError, match="no instance 'nobody'"):
        steps[0].state.cut_off(["nobody"])
