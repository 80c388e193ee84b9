"""Every experiment in topologies/ parses, validates and collapses, at t=0 and
across its whole timeline; demo.yaml's paths are checked number by number."""

import json
import pathlib

import pytest

from collapsar.cli import main
from collapsar.collapse import collapse
from collapsar.parser import parse_file
from collapsar.timeline import build_timeline

TOPOLOGIES = pathlib.Path(__file__).resolve().parents[2] / "topologies"
FILES = sorted(TOPOLOGIES.glob("*.yaml")) + sorted(TOPOLOGIES.glob("*.yml"))


def test_topologies_folder_is_not_empty():
    assert FILES, f"no experiment files in {TOPOLOGIES}"


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_topology_validates_and_collapses(path, capsys):
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    experiment = parse_file(path)
    state = collapse(experiment)
    paths = list(state.paths())
    assert paths, f"{path.name}: no path at t=0"
    for found in paths:
        assert found.src != found.dst
        assert found.delay_us >= 0 and 0.0 <= found.loss_ratio <= 1.0
        assert found.link_ids and all(0 <= link < len(state.links) for link in found.link_ids)
        assert state.links[found.link_ids[0]].src == found.src
        assert state.links[found.link_ids[-1]].dst == found.dst
    timeline = build_timeline(experiment)
    assert len(timeline.steps) == 1 + len({e.at_us for e in experiment.events if e.at_us > 0})
    assert list(timeline.steps[0].state.paths()) == paths
    names = set(state.graph.instances)
    for step in timeline.steps:
        links = step.state.links
        for found in step.state.paths():
            # A path only crosses links present at that time, as a connected walk.
            assert all(links[link].present for link in found.link_ids)
            ends = [(links[link].src, links[link].dst) for link in found.link_ids]
            assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))
        assert all(src in names and dst in names and src != dst for src, dst in step.changed)


def _demo(at_s):
    timeline = build_timeline(parse_file(TOPOLOGIES / "demo.yaml"))
    state = timeline.state_at(at_s * 1_000_000)
    return {(p.src, p.dst): (p.delay_us, p.jitter_us, p.loss_ratio, p.rate_bps, p.link_ids) for p in state.paths()}


def test_demo_at_start():
    paths = _demo(0)
    assert paths[("client", "server")] == (23000, 2000, 0.0001, 20_000_000, (0, 4, 6))
    assert paths[("server", "client-2")] == (23000, 2000, 0.0001, 10_000_000, (7, 5, 3))
    assert paths[("client", "client-2")] == (4000, 0, 0.0, 50_000_000, (0, 3))
    assert len(paths) == 6


def test_demo_over_time():
    # The event at 10 s slows the up direction only; latency is both ways.
    assert _demo(10)[("client", "server")][:4] == (43000, 2000, 0.0001, 5_000_000)
    assert _demo(10)[("server", "client")][:4] == (43000, 2000, 0.0001, 10_000_000)
    assert set(_demo(20)) == {("client", "server"), ("server", "client")}
    assert _demo(25)[("client", "server")][:4] == (23000, 2000, 0.0001, 20_000_000)


def test_demo_changed_pairs():
    steps = build_timeline(parse_file(TOPOLOGIES / "demo.yaml")).steps
    assert [step.at_us for step in steps] == [0, 10_000_000, 20_000_000, 25_000_000]
    assert set(steps[1].changed) == {
        ("client", "server"),
        ("client-2", "server"),
        ("server", "client"),
        ("server", "client-2"),
    }
    assert set(steps[2].changed) == {
        ("client-2", "server"),
        ("server", "client-2"),
        ("client", "client-2"),
        ("client-2", "client"),
    }
    assert set(steps[3].changed) == {("client", "server"), ("server", "client")}


NO_EXTRAS_JSON = {
    "loss_model": None,
    "reorder": 0.0,
    "duplicate": 0.0,
    "corrupt": 0.0,
    "in_order": False,
    "queue_packets": None,
}


def test_collapse_command_json(capsys):
    demo = str(TOPOLOGIES / "demo.yaml")
    assert main(["collapse", demo, "--json", "--at", "10s", "--from", "client"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [
        {
            "src": "client",
            "dst": "server",
            "latency_ms": 43.0,
            "jitter_ms": 2.0,
            "loss": 0.0001,
            "bandwidth_bps": 5_000_000,
            "links": [0, 4, 6],
            "distribution": "normal",
            **NO_EXTRAS_JSON,
        },
        {
            "src": "client",
            "dst": "client-2",
            "latency_ms": 4.0,
            "jitter_ms": 0.0,
            "loss": 0.0,
            "bandwidth_bps": 50_000_000,
            "links": [0, 3],
            "distribution": "normal",
            **NO_EXTRAS_JSON,
        },
    ]


def test_collapse_command_table_and_errors(capsys):
    demo = str(TOPOLOGIES / "demo.yaml")
    assert main(["collapse", demo]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SRC", "DST", "LATENCY", "JITTER", "LOSS", "BANDWIDTH", "LINKS"]
    assert lines[1].split() == ["server", "client", "23ms", "2ms", "0.01%", "10Mbps", "7,5,1"]
    assert lines[-1] == "6 paths at 0s between 3 instances"
    assert main(["collapse", demo, "--at", "soon"]) == 1
    assert "--at: expected a duration" in capsys.readouterr().err
    assert main(["collapse", demo, "--from", "nobody"]) == 1
    assert "no instance 'nobody'" in capsys.readouterr().err


def test_every_example_is_run_by_the_tier_it_needs():
    """tests/kernel/test_examples_run.py runs the examples without delay, jitter
    or loss on this host; tests/vm/test_examples_vm.py runs the others in the VM."""
    from examples_support import HOST_EXAMPLES, VM_EXAMPLES, needs_netem

    assert sorted(HOST_EXAMPLES + VM_EXAMPLES) == [path.name for path in FILES]
    assert [path.name for path in FILES if needs_netem(path)] == sorted(VM_EXAMPLES)
