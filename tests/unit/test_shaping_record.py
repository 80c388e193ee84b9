"""The shaping record on its way from a parsed link to a netlink message:
the netem fields (delay, jitter, distribution, loss) and the rate travel as
one typed record, and a change carries exactly the fields it sets.  (netem
itself is the VM tier's; everything before the kernel is here.)"""

import inspect
import struct

import pytest
from fake_tc import FakeTree
from test_manager_fakes import path

from collapsar.errors import CollapsarError
from collapsar.manager.core import EmulationCore, Override, effective
from collapsar.model import DISTRIBUTIONS, SHAPING_FIELDS, LinkProps, Path
from collapsar.parser import parse_text
from collapsar.tcal import Shaping, ShapingChange, ShapingTree, TcTree
from collapsar.tcal import nlmsg as m
from collapsar.tcal.dist import TABLE_SIZE, table_bytes
from collapsar.tcal.plan import leaf_params
from collapsar.timeline import build_timeline

NETEM = LinkProps(delay_us=4_000, jitter_us=1_000, distribution="paretonormal", loss_ratio=0.02, rate_bps=3_000_000)
IPS = {"a": "10.77.0.2", "b": "10.77.0.3"}


def test_fields_and_distributions_are_the_records():
    assert SHAPING_FIELDS == ("delay_us", "jitter_us", "distribution", "loss_ratio", "rate_bps", "extras")
    assert DISTRIBUTIONS == ("normal", "pareto", "paretonormal", "uniform")
    assert all(len(table_bytes(name)) == 2 * TABLE_SIZE for name in DISTRIBUTIONS)  # each has netem's table


def test_a_link_written_in_yaml_reaches_the_path_and_the_destination_record():
    timeline = build_timeline(
        parse_text(
            "experiment: {name: r}\nservices: {a: {command: [x]}, b: {command: [x]}}\n"
            "links:\n  - {from: a, to: b, latency: 4ms, jitter: 1ms, distribution: paretonormal, "
            "loss: 2%, bandwidth: 3Mbps}\n"
        )
    )
    there = timeline.steps[0].state.path("a", "b")
    assert there.props == NETEM
    shaping = Shaping.of("10.77.0.3", there.props)
    assert shaping == Shaping("10.77.0.3", 3_000_000, 4_000, 1_000, "paretonormal", 0.02)
    assert shaping.props == NETEM and shaping.needs_netem


def test_the_record_becomes_the_leaf_and_its_netem_message():
    leaf = leaf_params(Shaping.of("10.77.0.3", NETEM), netem=True)
    assert (leaf.kind, leaf.delay_us, leaf.jitter_us, leaf.distribution, leaf.loss_ratio) == (
        "netem",
        4_000,
        1_000,
        "paretonormal",
        0.02,
    )
    options = m.parse_attrs(m.netem_options(leaf, True))[m.TCA_OPTIONS]
    attrs = m.parse_attrs(options, 24)
    assert struct.unpack("=q", attrs[m.TCA_NETEM_LATENCY64])[0] == 4_000_000
    assert struct.unpack("=q", attrs[m.TCA_NETEM_JITTER64])[0] == 1_000_000
    assert attrs[m.TCA_NETEM_DELAY_DIST] == table_bytes("paretonormal")
    assert struct.unpack_from("=6I", options)[2] == round(0.02 * 0xFFFFFFFF)


def test_a_change_sets_exactly_the_fields_that_differ():
    slower = LinkProps(delay_us=4_000, jitter_us=2_000, distribution="uniform", loss_ratio=0.02, rate_bps=3_000_000)
    change = ShapingChange.between(NETEM, slower)
    assert change.values() == {"jitter_us": 2_000, "distribution": "uniform"}
    assert not change.rate_only
    assert ShapingChange.between(None, slower).values() == {name: getattr(slower, name) for name in SHAPING_FIELDS}
    assert ShapingChange.between(slower, slower).fields == frozenset()
    assert ShapingChange.of(rate_bps=10**6).rate_only
    with pytest.raises(CollapsarError, match=r"cannot change \['latency'\]; expected some of"):
        ShapingChange.of(latency=5)


def test_the_core_sends_netem_fields_and_compounds_loss_under_an_override():
    core = EmulationCore("a", "eth0", "ns-a", IPS, FakeTree, Shaping, netem=True, wire_overhead=True)
    core.install({"b": Path("a", "b", 4_000, 1_000, 0.02, 3_000_000, (1,), "paretonormal")})
    core.apply({"b": Path("a", "b", 4_000, 1_500, 0.02, 3_000_000, (1,), "pareto")})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"jitter_us": 1_500, "distribution": "pareto"}})
    core.set_overrides({"b": Override(1_000_000, 0.5)})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"loss_ratio": 0.51, "rate_bps": 1_000_000}})
    held = core.tree.shapings["10.77.0.3"]
    assert (held.delay_us, held.jitter_us, held.distribution, held.loss_ratio) == (4_000, 1_500, "pareto", 0.51)


def test_without_netem_an_override_leaves_the_loss_alone():
    assert effective(path("a", "b"), Override(10**6, 0.5), netem=False) == LinkProps(rate_bps=10**6)
    assert effective(path("a", "b"), Override(queue_us=9_000), netem=False) == path("a", "b").props


def test_a_standing_queue_adds_to_the_paths_delay():
    core = EmulationCore("a", "eth0", "ns-a", IPS, FakeTree, Shaping, netem=True, wire_overhead=True)
    core.install({"b": Path("a", "b", 4_000, 1_000, 0.0, 3_000_000, (1,), "normal")})
    core.set_overrides({"b": Override(queue_us=12_000)})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"delay_us": 16_000}})
    core.set_overrides({"b": Override(1_000_000, 0.0, 12_000)})  # a share as well: only the rate moves
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"rate_bps": 1_000_000}})
    core.set_overrides({"b": None})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"delay_us": 4_000, "rate_bps": 3_000_000}})


@pytest.mark.parametrize("make", [FakeTree, TcTree])
def test_both_trees_keep_the_protocol(make):
    tree = make("eth0", netns=None, wire_overhead=True, netem=True)  # as a TreeFactory is called
    for name, member in vars(ShapingTree).items():
        if name.startswith("_"):
            continue
        assert hasattr(tree, name), name
        if callable(member):
            wanted = list(inspect.signature(member).parameters)[1:]  # without self
            assert list(inspect.signature(getattr(tree, name)).parameters) == wanted, name
