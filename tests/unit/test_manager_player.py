"""What the player asks of a host at each step, against fake timelines."""

import time

from test_manager_fakes import FakeState, full_mesh, path, timeline_of

from collapsar.impairments import NO_EXTRAS
from collapsar.manager.play.player import (
    BULK_CHANGE,
    HOT_DESTINATIONS,
    Player,
    StepPlan,
    describe_event,
    lineages,
    plan_step,
)
from collapsar.model import LinkSetEvent, PartitionEvent, ServiceEvent

ABC = ["a", "b", "c"]


class Recorder:
    def __init__(self):
        self.calls = []

    def set_paths(self, src, paths):
        self.calls.append(("paths", src, dict(paths)))

    def start_instance(self, instance):
        self.calls.append(("start", instance))

    def stop_instance(self, instance):
        self.calls.append(("stop", instance))

    def kill_instance(self, instance):
        self.calls.append(("kill", instance))

    def mark_instance(self, instance, status):
        self.calls.append(("mark", instance, status))


def test_link_change_touches_only_changed_paths():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(ABC, {**full_mesh(ABC), ("a", "b"): path("a", "b", rate_bps=1_000_000)})
    event = LinkSetEvent(1000, "a", "b", {"rate_bps": 1_000_000}, {})
    timeline = timeline_of([(0, (), s0), (1000, (event,), s1)])
    plan = plan_step(s0, timeline.steps[1])
    assert plan == StepPlan(paths={"a": {"b": path("a", "b", rate_bps=1_000_000)}})


def test_leave_stops_and_cuts_crash_kills():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(["a"], {})
    events = (ServiceEvent(1000, "b", "leave", ("b",)), ServiceEvent(1000, "c", "crash", ("c",)))
    plan = plan_step(s0, timeline_of([(0, (), s0), (1000, events, s1)]).steps[1])
    assert plan.stop == ["b"] and plan.kill == ["c"] and plan.start == []
    assert plan.paths["a"] == {"b": None, "c": None}
    assert plan.paths["b"] == {"a": None, "c": None}


def test_join_starts_after_its_paths_are_in_place():
    s0 = FakeState(["a"], {})
    s1 = FakeState(["a", "b"], full_mesh(["a", "b"]))
    timeline = timeline_of([(0, (), s0), (500, (ServiceEvent(500, "b", "join", ("b",)),), s1)])
    recorder = Recorder()
    player = Player(timeline, recorder)
    player.start()
    time.sleep(0.05)
    player.stop()
    assert recorder.calls == [
        ("paths", "a", {"b": path("a", "b")}),
        ("paths", "b", {"a": path("b", "a")}),
        ("start", "b"),
    ]
    assert len(player.log) == 1 and player.pending == 0
    assert player.log[0].label == "b join [b]"


def test_disconnect_cuts_paths_but_keeps_the_process():
    s0 = FakeState(ABC, full_mesh(ABC))
    paths = {k: v for k, v in full_mesh(ABC).items() if "c" not in k}
    s1 = FakeState(ABC, paths, disconnected={"c"})
    plan = plan_step(s0, timeline_of([(0, (), s0), (9, (ServiceEvent(9, "c", "disconnect", ("c",)),), s1)]).steps[1])
    assert plan.stop == [] and plan.kill == [] and plan.start == []
    assert plan.paths == {"a": {"c": None}, "b": {"c": None}, "c": {"a": None, "b": None}}
    assert plan.marks == {"c": "disconnected"}
    back = plan_step(s1, timeline_of([(0, (), s1), (9, (), s0)]).steps[1])
    assert back.marks == {"c": "up"} and back.paths["c"] == {"a": path("c", "a"), "b": path("c", "b")}


def test_local_filter_keeps_only_this_hosts_instances():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(["a"], {})
    events = (ServiceEvent(1, "b", "leave", ("b", "c")),)
    plan = plan_step(s0, timeline_of([(0, (), s0), (1, events, s1)]).steps[1], local={"a", "b"})
    assert plan.stop == ["b"]
    assert set(plan.paths) == {"a", "b"}


def test_events_are_described_for_the_log():
    assert (
        describe_event(PartitionEvent(0, (frozenset({"x", "y"}), frozenset({"z"})), "start"))
        == "partition start x,y | z"
    )
    assert describe_event(ServiceEvent(0, "web", "crash", ("web-2", "web-3"))) == "web crash [web-2, web-3]"


def _plan(pairs: dict[tuple[str, str], int | None]) -> StepPlan:
    """A step changing these (src, dst) paths to these rates (None: cut)."""
    plan = StepPlan()
    for (src, dst), rate in pairs.items():
        plan.paths.setdefault(src, {})[dst] = None if rate is None else path(src, dst, rate_bps=rate)
    return plan


def test_lineages_keep_what_bulk_steps_change_alike_together():
    many = [f"d{i}" for i in range(BULK_CHANGE)]
    values = lambda rate: (0, 0, "normal", 0.0, rate, NO_EXTRAS)  # noqa: E731 (shaping_values of path())
    plans = [
        _plan({("s", d): 5_000_000 for d in many}),  # 1: a bulk step for s: every pair it changes
        _plan({("s", "d0"): 7_000_000, ("t", "d1"): 7_000_000}),  # 2: a few paths: left out
        _plan({("s", d): (None if d == "d3" else 6_000_000) for d in many}),  # 3: bulk, one cut among them
    ]
    got = lineages(plans)
    assert set(got) == {"s"}
    assert got["s"]["d1"] == got["s"]["d2"] == ((1, values(5_000_000)), (3, values(6_000_000)))
    assert got["s"]["d3"] == ((1, values(5_000_000)), (3, None))
    assert got["s"]["d0"] == got["s"]["d1"]  # step 2 changed d0 alone: not a bulk step


def test_lineages_single_out_a_destination_every_tree_changes():
    sources = [f"s{i}" for i in range(BULK_CHANGE)]
    plans = [
        _plan({(src, "hot"): 3_000_000 for src in sources} | {("s0", "cold"): 3_000_000}),
        _plan({(src, "away"): None for src in sources}),  # a disconnect: cut everywhere
        _plan({(src, "away"): 9_000_000 for src in sources}),  # the reconnect: a restore, not new values
    ]
    got = lineages(plans)
    assert got == {src: {"hot": ((1, (0, 0, "normal", 0.0, 3_000_000, NO_EXTRAS)),)} for src in sources}


def test_lineages_cap_the_destinations_singled_out():
    sources = [f"s{i}" for i in range(BULK_CHANGE)]
    hot = [f"h{i:02d}" for i in range(HOT_DESTINATIONS + 4)]
    # h00 changes at two steps, the others at one: h00 is kept, then by name
    plans = [_plan({(src, h): 1_000_000 + i for src in sources}) for i, h in enumerate(hot)]
    plans.append(_plan({(src, "h00"): 2_000_000 for src in sources}))
    got = lineages(plans)
    assert sorted(got["s0"]) == hot[:HOT_DESTINATIONS]
    assert len(got["s0"]["h00"]) == 2


def test_step_weight_counts_sources_and_paths():
    assert _plan({("a", "b"): 1, ("a", "c"): 1, ("b", "a"): None}).weight == 2 * 100 + 3
    assert StepPlan(start=["x"]).weight == 0
    # b's guard goes on: a's tree and c's are not touched for it (30 each); b's own is (100).
    cut_b = _plan({("a", "b"): None, ("c", "b"): None, ("b", "a"): None, ("b", "c"): None})
    cut_b.cut_off = ["b"]
    assert cut_b.weight == 30 + 30 + 100 + 4


def test_a_disconnect_and_a_reconnect_name_the_instance_for_its_guard():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(ABC, {k: v for k, v in full_mesh(ABC).items() if "c" not in k}, disconnected={"c"})
    event = ServiceEvent(9, "c", "disconnect", ("c",))
    plan = plan_step(s0, timeline_of([(0, (), s0), (9, (event,), s1)]).steps[1])
    assert (plan.cut_off, plan.reached) == (["c"], [])
    back = plan_step(s1, timeline_of([(0, (), s1), (9, (), s0)]).steps[1])
    assert (back.cut_off, back.reached) == ([], ["c"])
    # Elsewhere the paths say nothing of who others reach: no guard lists.
    assert plan_step(s0, timeline_of([(0, (), s0), (9, (event,), s1)]).steps[1], local={"a"}).cut_off == []


def test_a_partition_that_leaves_each_instance_someone_cuts_no_one_off():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(ABC, {k: v for k, v in full_mesh(ABC).items() if k not in {("a", "c"), ("c", "a")}})
    event = PartitionEvent(9, (frozenset({"a"}), frozenset({"c"})), "start")
    plan = plan_step(s0, timeline_of([(0, (), s0), (9, (event,), s1)]).steps[1])
    assert plan.paths == {"a": {"c": None}, "c": {"a": None}}
    assert (plan.cut_off, plan.reached) == ([], [])


class GuardRecorder(Recorder):
    def guard(self, cut_off, reached):
        self.calls.append(("guard", cut_off, reached))
        return lambda: self.calls.append(("guarded",))


def test_the_guard_is_told_before_the_paths_and_finishes_after_them():
    s0 = FakeState(ABC, full_mesh(ABC))
    s1 = FakeState(ABC, {k: v for k, v in full_mesh(ABC).items() if "c" not in k}, disconnected={"c"})
    timeline = timeline_of([(0, (), s0), (100, (ServiceEvent(100, "c", "disconnect", ("c",)),), s1), (200, (), s0)])
    recorder = GuardRecorder()
    player = Player(timeline, recorder)
    player.start()
    time.sleep(0.3)
    player.stop()
    kinds = [call[0] for call in recorder.calls]
    assert kinds == ["guard", "paths", "paths", "paths", "guarded", "mark"] * 2
    assert recorder.calls[0] == ("guard", ["c"], []) and recorder.calls[6] == ("guard", [], ["c"])
