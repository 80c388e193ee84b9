"""Collapse at t=0: formulas, link ids, routing rules, the NetworkState API."""

import pytest

from collapsar.collapse import collapse, unreachable_pairs
from collapsar.errors import CollapsarError, TopologyError
from collapsar.model import (
    Bridge,
    Experiment,
    LinkEvent,
    LinkProps,
    LinkSpec,
    Service,
    ServiceEvent,
    Settings,
)

MS = 1000


def props(delay_ms=0.0, jitter_ms=0.0, loss=0.0, rate=None, dist="normal"):
    return LinkProps(
        delay_us=int(delay_ms * MS), jitter_us=int(jitter_ms * MS), distribution=dist, loss_ratio=loss, rate_bps=rate
    )


def link(a, b, up=None, down="same"):
    up = up or props()
    return LinkSpec(a, b, up, up if down == "same" else down)


def experiment(services, bridges, links, events=(), metric="latency"):
    services = tuple(s if isinstance(s, Service) else Service(s) for s in services)
    return Experiment(
        Settings("t", path_metric=metric), services, tuple(Bridge(b) for b in bridges), tuple(links), tuple(events)
    )


def chain(first, second):
    """a - s1 - s2 - b with the given props on a->s1 and s1->s2 (s2->b plain)."""
    return experiment(
        ["a", "b"], ["s1", "s2"], [link("a", "s1", first), link("s1", "s2", second), link("s2", "b", props())]
    )


@pytest.mark.parametrize(
    "first, second, expected",
    [
        # (delay_us, jitter_us, loss_ratio, rate_bps, distribution)
        (props(1, 3), props(2, 4), (3000, 5000, 0.0, None, "normal")),
        (props(loss=0.1), props(loss=0.2), (0, 0, 0.28, None, "normal")),
        (props(loss=0.5), props(loss=0.5), (0, 0, 0.75, None, "normal")),
        (props(rate=10**7), props(rate=10**6), (0, 0, 0.0, 10**6, "normal")),
        (props(rate=10**7), props(), (0, 0, 0.0, 10**7, "normal")),
        (props(5, 1, dist="uniform"), props(5, 2, dist="pareto"), (10000, 2236, 0.0, None, "pareto")),
        (props(5, 2, dist="uniform"), props(5, 2, dist="pareto"), (10000, 2828, 0.0, None, "uniform")),
        (props(0.25), props(0.5), (750, 0, 0.0, None, "normal")),
    ],
)
def test_path_formulas(first, second, expected):
    path = collapse(chain(first, second)).path("a", "b")
    assert (path.delay_us, path.jitter_us, path.loss_ratio, path.rate_bps, path.distribution) == expected
    assert path.rtt_hint_us == 2 * expected[0]


def test_link_ids_follow_file_order_instances_and_up_before_down():
    exp = experiment(
        [Service("web", replicas=2), "db"],
        ["s1"],
        [link("web", "s1"), LinkSpec("s1", "db", props(), None), link("web", "db")],
    )
    links = collapse(exp).links
    assert [(i, link.src, link.dst) for i, link in links.items()] == [
        (0, "web", "s1"),
        (1, "s1", "web"),
        (2, "web-2", "s1"),
        (3, "s1", "web-2"),
        (4, "s1", "db"),  # one-way: no down link
        (5, "web", "db"),
        (6, "db", "web"),
        (7, "web-2", "db"),
        (8, "db", "web-2"),
    ]
    assert all(link.present for link in links.values())


def test_later_joins_get_ids_after_all_initial_ones_in_event_order():
    new = LinkSpec("s1", "s2", props(1), props(1))
    exp = experiment(
        [Service("web", replicas=1)],
        ["s1", "s2"],
        [link("web", "s1")],
        [ServiceEvent(1_000_000, "web", "join", ("web-2",)), LinkEvent(2_000_000, "s1", "s2", "join", spec=new)],
    )
    links = collapse(exp).links
    assert [(i, link.src, link.dst, link.present) for i, link in links.items()] == [
        (0, "web", "s1", True),
        (1, "s1", "web", True),
        (2, "web-2", "s1", False),
        (3, "s1", "web-2", False),
        (4, "s1", "s2", False),
        (5, "s2", "s1", False),
    ]


def test_link_ids_of_a_path_in_order_both_ways():
    state = collapse(chain(props(1), props(2)))
    assert state.path("a", "b").link_ids == (0, 2, 4)
    assert state.path("b", "a").link_ids == (5, 3, 1)


def test_asymmetric_link_properties():
    exp = experiment(["a", "b"], [], [link("a", "b", props(3, rate=10**7), props(7, rate=10**6))])
    state = collapse(exp)
    assert (state.path("a", "b").delay_us, state.path("a", "b").rate_bps) == (3000, 10**7)
    assert (state.path("b", "a").delay_us, state.path("b", "a").rate_bps) == (7000, 10**6)


def test_one_way_link_has_no_way_back():
    exp = experiment(["a", "b"], [], [LinkSpec("a", "b", props(1), None)])
    state = collapse(exp)
    assert state.path("a", "b").delay_us == 1000
    assert state.path("b", "a") is None
    assert unreachable_pairs(exp) == [("b", "a")]


def test_instances_never_forward_traffic():
    # a - m - b: m is a service, so a cannot reach b through it.
    exp = experiment(["a", "m", "b"], [], [link("a", "m"), link("m", "b")])
    assert collapse(exp).path("a", "b") is None
    assert unreachable_pairs(exp) == [("a", "b"), ("b", "a")]


def test_latency_metric_prefers_the_faster_longer_route():
    exp = experiment(
        ["a", "b"],
        ["s1", "s2", "s3"],
        [
            link("a", "s1"),
            link("s1", "s2", props(10)),
            link("s2", "b"),
            link("s1", "s3", props(2)),
            link("s3", "s2", props(2)),
        ],
    )
    assert collapse(exp).path("a", "b").delay_us == 4000
    hops = experiment(["a", "b"], ["s1", "s2", "s3"], list(exp.links), metric="hops")
    assert collapse(hops).path("a", "b").delay_us == 10000


def test_hops_metric_breaks_ties_by_latency():
    exp = experiment(
        ["a", "b"],
        ["s1", "s2", "s3"],
        [link("a", "s1"), link("s2", "b"), link("s3", "b"), link("s1", "s2", props(9)), link("s1", "s3", props(4))],
        metric="hops",
    )
    path = collapse(exp).path("a", "b")
    assert (path.delay_us, len(path.link_ids)) == (4000, 3)


def test_latency_ties_go_to_fewer_hops_then_lowest_link_id():
    exp = experiment(
        ["a", "b"],
        ["s1", "s2", "s3", "s4"],
        [
            link("a", "s1"),
            link("s4", "b"),
            link("s1", "s2", props(1)),
            link("s2", "s3", props(1)),
            link("s3", "s4", props(1)),
            link("s1", "s4", props(3)),  # same 3ms, fewer hops
            link("s1", "s4", props(3)),
        ],
    )  # parallel twin: higher ids lose the tie
    assert collapse(exp).path("a", "b").link_ids == (0, 10, 2)


def test_service_to_service_link_per_instance_pair():
    exp = experiment([Service("c", replicas=2), Service("s", replicas=2)], [], [link("c", "s", props(1))])
    state = collapse(exp)
    assert state.path("c-2", "s-2").link_ids == (6,)
    assert state.path("c", "c-2") is None  # no path among clients
    assert len(list(state.paths())) == 8


def test_state_api():
    exp = experiment(
        [Service("web", replicas=2), Service("late", replicas=0)],
        ["s1"],
        [link("web", "s1", props(1)), link("late", "s1", props(1))],
        [ServiceEvent(1_000_000, "late", "join", ("late",))],
    )
    state = collapse(exp)
    assert state.instances == ("web", "web-2")
    assert state.status("web-2") == "up"
    with pytest.raises(CollapsarError, match="not present"):
        state.status("late")
    with pytest.raises(CollapsarError, match="no instance 'nope'"):
        state.path("nope", "web")
    assert [(p.src, p.dst, p.delay_us) for p in state.paths()] == [("web", "web-2", 2000), ("web-2", "web", 2000)]
    assert [p.dst for p in state.paths(["web-2"])] == ["web"]
    assert state.unreachable() == []


def test_sources_limit_the_computed_paths():
    exp = experiment([Service("web", replicas=3)], ["s1"], [link("web", "s1", props(1))])
    state = collapse(exp, sources=["web-3"])
    assert state.sources == ("web-3",)
    assert [p.dst for p in state.paths()] == ["web", "web-2"]
    with pytest.raises(CollapsarError, match="not computed"):
        state.path("web", "web-2")
    with pytest.raises(CollapsarError, match="no instance 'web-9'"):
        collapse(exp, sources=["web-9"])


def test_link_with_the_same_element_at_both_ends_is_rejected():
    exp = experiment(["a"], ["s1"], [link("s1", "s1")])
    with pytest.raises(TopologyError, match="two different ends"):
        collapse(exp)


def test_collapse_is_deterministic():
    exp = experiment(
        [Service("a", replicas=3), Service("b", replicas=2)],
        ["s1", "s2"],
        [link("a", "s1", props(1)), link("b", "s2", props(1)), link("s1", "s2", props(2)), link("s2", "s1", props(2))],
    )
    first = list(collapse(exp).paths())
    assert first == list(collapse(exp).paths())
    assert len(first) == 20
