"""Property tests: on random small topologies, collapse agrees with a plain
networkx reference (delays, hop counts, loss, rates, reachability), and every
path is a connected walk of present links from its source to its destination."""

import math

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collapsar.collapse import NetworkState, collapse
from collapsar.model import (
    Bridge,
    BridgeEvent,
    Experiment,
    LinkEvent,
    LinkProps,
    LinkSetEvent,
    LinkSpec,
    Service,
    Settings,
)
from collapsar.routing import Router
from collapsar.timeline import build_timeline

PROPS = st.builds(
    LinkProps,
    # Few distinct delays: equal-cost routes (ties) are common.
    delay_us=st.one_of(st.sampled_from([0, 1000, 2000, 3000]), st.integers(0, 50_000)),
    jitter_us=st.integers(0, 3000),
    distribution=st.sampled_from(["normal", "pareto", "paretonormal", "uniform"]),
    loss_ratio=st.sampled_from([0.0, 0.0, 0.01, 0.1, 0.5]),
    rate_bps=st.one_of(st.none(), st.integers(1, 10**9)),
)


@st.composite
def experiments(draw):
    bridges = [f"s{i}" for i in range(draw(st.integers(0, 5)))]
    services = [Service(f"v{i}", replicas=draw(st.integers(1, 2))) for i in range(draw(st.integers(1, 4)))]
    elements = bridges + [s.name for s in services]
    links = []
    for _ in range(draw(st.integers(0, 12))):
        if len(elements) < 2:
            break
        a, b = draw(st.lists(st.sampled_from(elements), min_size=2, max_size=2, unique=True))
        down = draw(st.one_of(st.none(), PROPS))
        links.append(LinkSpec(a, b, draw(PROPS), down))
    metric = draw(st.sampled_from(["latency", "hops"]))
    return Experiment(
        Settings("prop", path_metric=metric), tuple(services), tuple(Bridge(b) for b in bridges), tuple(links)
    )


def reference_graph(state, src, dst):
    """Bridges plus only the two instances: no other instance can be crossed."""
    graph = nx.MultiDiGraph()
    for link_id, link in state.links.items():
        ends = {link.src, link.dst}
        others = ends - set(state.graph.bridges) - {src, dst}
        if not others:
            graph.add_edge(link.src, link.dst, key=link_id, props=link.props)
    return graph


def best_edge(graph, a, b):
    return min(graph[a][b].items(), key=lambda item: (item[1]["props"].delay_us, item[0]))


def fold(props_list):
    keep = math.prod(1 - p.loss_ratio for p in props_list)
    rates = [p.rate_bps for p in props_list if p.rate_bps is not None]
    return (
        sum(p.delay_us for p in props_list),
        round(math.sqrt(sum(p.jitter_us**2 for p in props_list))),
        round(1 - keep, 12),
        min(rates) if rates else None,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(experiments())
def test_collapse_agrees_with_networkx(experiment):
    state = collapse(experiment)
    instances = state.instances
    # The vectorised fold (paths) and the per-path walk (path) agree.
    assert list(state.paths()) == [
        state.path(a, b) for a in instances for b in instances if a != b and state.path(a, b) is not None
    ]
    for src in instances:
        for dst in instances:
            if src == dst:
                continue
            graph = reference_graph(state, src, dst)
            path = state.path(src, dst)
            reachable = src in graph and dst in graph and nx.has_path(graph, src, dst)
            assert (path is not None) == reachable, (src, dst)
            if path is None:
                continue
            links = [state.links[link] for link in path.link_ids]
            # A connected walk of present links from src to dst, never via another instance.
            assert links[0].src == src and links[-1].dst == dst
            assert all(a.dst == b.src for a, b in zip(links, links[1:]))
            assert all(link.present for link in links)
            assert all(link.dst in state.graph.bridges for link in links[:-1])
            assert (path.delay_us, path.jitter_us, path.loss_ratio, path.rate_bps) == fold(
                [link.props for link in links]
            )

            def weight(a, b, edges):
                return min(e["props"].delay_us for e in edges.values())

            if experiment.settings.path_metric == "latency":
                assert path.delay_us == nx.dijkstra_path_length(graph, src, dst, weight=weight)
                nodes = list(nx.all_shortest_paths(graph, src, dst, weight=weight))
            else:
                hops = nx.shortest_path_length(graph, src, dst)
                assert len(path.link_ids) == hops
                candidates = list(nx.all_shortest_paths(graph, src, dst))
                lengths = [
                    sum(best_edge(graph, a, b)[1]["props"].delay_us for a, b in zip(n, n[1:])) for n in candidates
                ]
                assert path.delay_us == min(lengths)
                nodes = [n for n, length in zip(candidates, lengths) if length == min(lengths)]
            if len(nodes) == 1:  # a unique route: every property must match it
                edges = [best_edge(graph, a, b) for a, b in zip(nodes[0], nodes[0][1:])]
                delays = [graph[a][b] for a, b in zip(nodes[0], nodes[0][1:])]
                if all(len({e["props"].delay_us for e in d.values()}) == len(d) for d in delays):
                    assert path.link_ids == tuple(key for key, _ in edges)
                    assert (path.delay_us, path.jitter_us, path.loss_ratio, path.rate_bps) == fold(
                        [e["props"] for _, e in edges]
                    )


@st.composite
def experiments_with_events(draw):
    base = draw(experiments())
    links_on = {spec.key: True for spec in base.links}
    specs = {spec.key: spec for spec in base.links}
    bridges_on = {b.name: True for b in base.bridges}
    events, at_us = [], 0
    for _ in range(draw(st.integers(1, 8))):
        at_us += draw(st.sampled_from([0, 1_000_000]))  # some events share a time
        kind = draw(st.sampled_from(["set", "link", "bridge"]))
        if kind == "bridge" and bridges_on:
            name = draw(st.sampled_from(sorted(bridges_on)))
            bridges_on[name] = not bridges_on[name]
            events.append(BridgeEvent(at_us, name, "join" if bridges_on[name] else "leave"))
        elif links_on:
            key = draw(st.sampled_from(sorted(links_on, key=sorted)))
            spec = specs[key]
            if kind == "set" and links_on[key]:
                up = {"delay_us": draw(st.sampled_from([0, 1000, 2000, 4000]))}
                down = {"loss_ratio": 0.2} if spec.down is not None else {}
                events.append(LinkSetEvent(at_us, spec.a, spec.b, up, down))
            else:
                links_on[key] = not links_on[key]
                events.append(LinkEvent(at_us, spec.a, spec.b, "join" if links_on[key] else "leave"))
    return Experiment(base.settings, base.services, base.bridges, base.links, tuple(events))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(experiments_with_events())
def test_incremental_timeline_equals_recomputing(experiment):
    previous = None
    for step in build_timeline(experiment).steps:
        state = step.state
        router = Router(state.graph, state._rows, experiment.settings.path_metric)
        router.initial(state.conditions)
        scratch = NetworkState(state.graph, state.conditions, state._rows, *router.snapshot())
        current = {(p.src, p.dst): p for p in state.paths()}
        assert current == {(p.src, p.dst): p for p in scratch.paths()}
        if previous is not None:
            assert set(step.changed) == {
                pair for pair in current.keys() | previous.keys() if current.get(pair) != previous.get(pair)
            }
        previous = current
