"""The emulation core against a fake TCAL tree: which TCAL call each path
change becomes."""

import pytest
from fake_tc import FakeTree
from test_manager_fakes import path

from collapsar.errors import CollapsarError
from collapsar.manager.core import EmulationCore, Override, needs_netem
from collapsar.tcal.plan import Shaping

IPS = {"a": "10.77.0.2", "b": "10.77.0.3", "c": "10.77.0.4"}


def make_core(netem=False) -> EmulationCore:
    return EmulationCore("a", "eth0", "ns-a", IPS, FakeTree, Shaping, netem=netem, wire_overhead=True)


def test_install_sets_up_reachable_and_cuts_unreachable_destinations():
    core = make_core()
    core.install({"a": None, "b": path("a", "b", rate_bps=10_000_000), "c": None})
    tree = core.tree
    assert tree.calls == [("setup", ("10.77.0.3", "10.77.0.4")), ("cut", "10.77.0.4")]
    assert tree.shapings["10.77.0.3"] == Shaping("10.77.0.3", 10_000_000)
    assert tree.netns == "ns-a" and tree.ifname == "eth0"
    assert core.configured() == {"b": path("a", "b", rate_bps=10_000_000), "c": None}


def test_property_change_is_one_batched_change_with_only_the_changed_fields():
    core = make_core(netem=True)
    core.install({"b": path("a", "b", delay_us=1000), "c": path("a", "c", delay_us=1000)})
    core.apply({"b": path("a", "b", delay_us=5000), "c": path("a", "c", delay_us=1000, rate_bps=2_000_000)})
    assert core.tree.calls[-1] == (
        "change_many",
        {"10.77.0.3": {"delay_us": 5000}, "10.77.0.4": {"rate_bps": 2_000_000}},
    )
    assert len(core.tree.calls) == 2


def test_install_hands_the_tree_its_groups_by_address():
    core = make_core()
    core.install({"b": path("a", "b"), "c": path("a", "c")}, {"b": ((1, None),)})
    assert core.tree.groups == {"10.77.0.3": ((1, None),)}


def test_one_change_object_per_transition_however_many_destinations_take_it():
    ips = {name: f"10.77.0.{i + 2}" for i, name in enumerate("abcdef")}
    core = EmulationCore("a", "eth0", "ns-a", ips, FakeTree, Shaping, netem=True, wire_overhead=True)
    core.install({d: path("a", d, delay_us=1000) for d in "bcdef"} | {"f": path("a", "f", delay_us=2000)})
    seen = []
    change_groups = core.tree.change_groups
    core.tree.change_groups = lambda groups: seen.append(list(groups)) or change_groups(groups)
    core.set_overrides({"e": Override(rate_bps=1_000_000)})
    # b, c, d: 1 ms -> 3 ms (one transition); e too, but under its share; f: 2 ms -> 3 ms
    core.apply({d: path("a", d, delay_us=3000) for d in "bcdef"})
    b, c, d, e, f = (ips[x] for x in "bcdef")
    groups = {tuple(group): change for group, change in seen[-1]}
    assert set(groups) == {(b, c, d), (f,), (e,)}  # one group per transition; e (shared) on its own
    assert groups[(b, c, d)].values() == groups[(f,)].values() == {"delay_us": 3000}
    assert core.tree.shapings[e] == Shaping(e, 1_000_000, delay_us=3000)
    assert {x: core.effective(x)["delay_us"] for x in "bcdef"} == dict.fromkeys("bcdef", 3000)


def test_cut_then_restore_with_new_properties():
    core = make_core()
    core.install({"b": path("a", "b")})
    core.apply({"b": None})
    assert core.tree.calls[-1] == ("cut", "10.77.0.3")
    assert core.configured() == {"b": None}
    core.apply({"b": None})  # already cut: nothing more
    assert len(core.tree.calls) == 2
    core.apply({"b": path("a", "b", rate_bps=1_000_000)})
    # The class takes the new rate before packets reach it again.
    assert core.tree.calls[-2:] == [("change_many", {"10.77.0.3": {"rate_bps": 1_000_000}}), ("restore", "10.77.0.3")]
    assert core.tree.cut_ips == set()


def test_restore_with_same_properties_sends_no_change():
    core = make_core()
    core.install({"b": path("a", "b")})
    core.apply({"b": None})
    core.apply({"b": path("a", "b")})
    assert core.tree.calls[-1] == ("restore", "10.77.0.3")


def test_destination_unknown_at_t0_is_added_later():
    core = make_core()
    core.install({"b": path("a", "b")})
    core.apply({"c": path("a", "c", rate_bps=3_000_000)})
    assert core.tree.calls[-1] == ("add", "10.77.0.4")
    assert core.tree.shapings["10.77.0.4"].rate_bps == 3_000_000


def test_placeholder_class_gets_every_field_when_restored():
    core = make_core()
    core.install({"b": None})
    core.apply({"b": path("a", "b", rate_bps=4_000_000)})
    assert core.tree.calls[-1] == ("restore", "10.77.0.3")
    assert core.tree.calls[-2][1]["10.77.0.3"]["rate_bps"] == 4_000_000
    assert set(core.tree.calls[-2][1]["10.77.0.3"]) == {
        "rate_bps",
        "delay_us",
        "jitter_us",
        "distribution",
        "loss_ratio",
        "extras",
    }


def test_own_instance_is_never_shaped():
    core = make_core()
    core.install({"a": path("a", "a"), "b": path("a", "b")})
    core.apply({"a": None})
    assert core.tree.calls == [("setup", ("10.77.0.3",))]


def test_tcal_rejection_reaches_the_caller():
    core = make_core(netem=False)
    with pytest.raises(CollapsarError, match="needs netem"):
        core.install({"b": path("a", "b", delay_us=10)})


def test_needs_netem_only_for_delay_jitter_or_loss():
    assert not needs_netem([path("a", "b"), None, path("b", "a", rate_bps=None)])
    assert needs_netem([path("a", "b"), path("b", "a", delay_us=1)])
    assert needs_netem([path("a", "b", loss_ratio=0.01)])
    assert not needs_netem([])


# ---- overrides from bandwidth sharing ---------------------------------------------


def test_override_narrows_rate_and_compounds_loss_then_clears():
    core = make_core(netem=True)
    core.install({"b": path("a", "b", delay_us=1000, loss_ratio=0.1), "c": path("a", "c", delay_us=1000)})
    core.set_overrides({"b": Override(4_000_000, 0.5), "c": Override(20_000_000)})
    # c's share is above its path's 10 Mbit/s: the path still caps it, nothing to change.
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"rate_bps": 4_000_000, "loss_ratio": 0.55}})
    assert core.configured()["b"].rate_bps == 10_000_000  # the configured path is kept
    core.set_overrides({"b": None})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"rate_bps": 10_000_000, "loss_ratio": 0.1}})
    assert core.overrides == {"c": Override(20_000_000)}


def test_path_change_under_an_override_keeps_the_share():
    core = make_core(netem=True)
    core.install({"b": path("a", "b", delay_us=1000)})
    core.set_overrides({"b": Override(4_000_000)})
    core.apply({"b": path("a", "b", delay_us=3000, rate_bps=2_000_000)})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"delay_us": 3000, "rate_bps": 2_000_000}})
    core.apply({"b": path("a", "b", delay_us=3000, rate_bps=50_000_000)})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"rate_bps": 4_000_000}})
    assert core.effective("b")["rate_bps"] == 4_000_000


def test_override_of_a_cut_destination_waits_for_its_restore():
    core = make_core(netem=False)
    core.install({"b": path("a", "b")})
    core.apply({"b": None})
    calls = len(core.tree.calls)
    core.set_overrides({"b": Override(3_000_000, 0.2)})  # no netem: the loss is not applied
    assert len(core.tree.calls) == calls and core.effective("b") is None
    core.apply({"b": path("a", "b")})
    assert core.tree.calls[-2:] == [("change_many", {"10.77.0.3": {"rate_bps": 3_000_000}}), ("restore", "10.77.0.3")]


def _core_of_four() -> tuple[EmulationCore, dict[str, str]]:
    ips = {name: f"10.77.0.{i + 2}" for i, name in enumerate("abcd")}
    core = EmulationCore("a", "eth0", "ns-a", ips, FakeTree, Shaping, netem=False, wire_overhead=True)
    core.install({d: path("a", d) for d in "bcd"})
    return core, ips


def test_a_step_that_leaves_no_path_cuts_the_whole_tree_in_one_call():
    core, ips = _core_of_four()
    core.apply(dict.fromkeys("bcd"))  # a disconnected: every path gone
    assert core.tree.calls[1:] == [("cut_all",)]
    assert core.configured() == dict.fromkeys("bcd") and core.effective("b") is None
    assert not any(core.tree.passes(ips[d]) for d in "bcd")
    core.apply({"b": None})  # already cut: nothing more
    # reconnected: the paths come back as they were (their classes kept them): one call
    core.apply({d: path("a", d) for d in "bcd"})
    assert core.tree.calls[2:] == [("restore_all",)]
    assert all(core.tree.passes(ips[d]) for d in "bcd")


def test_coming_back_from_a_whole_cut_cuts_those_still_without_a_path_first():
    core, ips = _core_of_four()
    core.apply(dict.fromkeys("bcd"))
    core.apply({"c": path("a", "c", rate_bps=2_000_000)})  # c alone comes back, with a new rate
    assert core.tree.calls[2:] == [
        ("change_many", {ips["c"]: {"rate_bps": 2_000_000}}),  # its class first
        ("cut", ips["b"]),
        ("cut", ips["d"]),
        ("restore_all",),
    ]
    assert [core.tree.passes(ips[d]) for d in "bcd"] == [False, True, False]
    assert core.configured() == {"b": None, "c": path("a", "c", rate_bps=2_000_000), "d": None}
    core.apply({"b": path("a", "b")})  # b's own cut now: restored by its filter
    assert core.tree.calls[-1] == ("restore", ips["b"])


def test_one_destination_left_without_a_path_is_cut_on_its_own():
    core, ips = _core_of_four()
    core.apply({"b": None, "c": None})
    core.apply({"d": None})  # the last one: WHOLE_CUT_FROM (2) not reached in this step
    assert core.tree.calls[1:] == [("cut", ips["b"]), ("cut", ips["c"]), ("cut", ips["d"])]
    assert not core.tree.all_cut


def test_a_guarded_destination_is_left_to_its_guard_and_comes_back_without_a_message():
    core = make_core()
    core.install({"b": path("a", "b"), "c": path("a", "c")})
    calls = len(core.tree.calls)
    core.apply({"b": None}, guarded={"b"})
    assert len(core.tree.calls) == calls  # the guard cuts b; this tree does nothing
    assert core.configured() == {"b": None, "c": path("a", "c")}
    assert core.tree.passes("10.77.0.3")  # its filter still points at its class
    core.apply({"b": path("a", "b")})
    assert len(core.tree.calls) == calls  # same values back: nothing to change, nothing to restore
    assert core.configured()["b"] == path("a", "b")


def test_a_guarded_destination_takes_new_values_before_its_guard_is_lifted():
    core = make_core()
    core.install({"b": path("a", "b"), "c": path("a", "c")})
    core.apply({"b": None}, guarded={"b"})
    core.apply({"b": path("a", "b", rate_bps=2_000_000)})
    assert core.tree.calls[-1] == ("change_many", {"10.77.0.3": {"rate_bps": 2_000_000}})  # no restore: never cut here
    core.unguard("b")  # back on its path: unguarding changes nothing
    assert core.tree.calls[-1][0] == "change_many"


def test_a_destination_still_without_a_path_is_cut_here_when_its_guard_goes():
    core = make_core()
    core.install({"b": path("a", "b"), "c": path("a", "c")})
    core.apply({"b": None}, guarded={"b"})
    core.unguard("b")  # reached again by others, not from a (a partition, say)
    assert core.tree.calls[-1] == ("cut", "10.77.0.3")
    assert not core.tree.passes("10.77.0.3")
    core.apply({"b": path("a", "b")})
    assert core.tree.calls[-1] == ("restore", "10.77.0.3")


def test_guards_and_a_whole_cut_of_this_instance_keep_apart():
    core = make_core()
    core.install({"b": path("a", "b"), "c": path("a", "c")})
    core.apply({"b": None, "c": None}, guarded={"b"})  # a cut off (cut_all) while b's guard is on
    assert core.tree.calls[-1] == ("cut_all",)
    core.unguard("b")  # b's guard goes while the whole tree is cut: held by cut_all
    core.apply({"c": path("a", "c")})  # a back, towards c only: b is cut by its own filter first
    assert core.tree.calls[-2:] == [("cut", "10.77.0.3"), ("restore_all",)]
    assert core.tree.passes("10.77.0.4") and not core.tree.passes("10.77.0.3")


def test_a_guarded_instance_absent_at_t0_gets_its_future_class_and_joins_without_a_message():
    core = make_core()
    future = {"c": path("a", "c", rate_bps=3_000_000)}
    core.install({"b": path("a", "b"), "c": None}, guarded={"c"}, future=future)
    assert core.tree.calls == [("setup", ("10.77.0.3", "10.77.0.4"))]  # no cut: its guard holds it
    assert core.tree.shapings["10.77.0.4"].rate_bps == 3_000_000
    assert core.configured() == {"b": path("a", "b"), "c": None}
    core.apply({"c": path("a", "c", rate_bps=3_000_000)})
    assert core.tree.calls == [("setup", ("10.77.0.3", "10.77.0.4"))]
