"""The sharing loop of one manager, period by period: a real timeline of a
dumbbell, real emulation cores on fake TCAL trees, counters fed by a plant
where each flow sends min(what it wants, what its class allows), and a
loopback wire between managers."""

import pytest
from fake_tc import FakeTree

from collapsar.manager.core import EmulationCore, Override
from collapsar.manager.experiment import all_instances, paths_from
from collapsar.manager.sharing import model
from collapsar.manager.sharing.bus import MetadataBus
from collapsar.manager.sharing.loop import ShareLoop, ShareSettings
from collapsar.manager.sharing.metadata import Codec, FlowReport, Message
from collapsar.manager.sharing.routes import Routes
from collapsar.parser import parse_text
from collapsar.tcal.plan import Shaping
from collapsar.timeline import build_timeline

M = 1_000_000
PERIOD_NS = 50_000_000

DUMBBELL = """
experiment: {name: db}
services:
  a: {command: [x]}
  b: {command: [x]}
  c: {command: [x]}
  ra: {command: [x]}
  rb: {command: [x]}
  rc: {command: [x]}
bridges: [l, r]
links:
  - {from: a, to: l, latency: 1ms, bandwidth: 100Mbps}
  - {from: b, to: l, latency: 1ms, bandwidth: 100Mbps}
  - {from: c, to: l, latency: 1ms, bandwidth: 2Mbps}
  - {from: r, to: ra, latency: 1ms, bandwidth: 100Mbps}
  - {from: r, to: rb, latency: 1ms, bandwidth: 100Mbps}
  - {from: r, to: rc, latency: 1ms, bandwidth: 100Mbps}
  - {from: l, to: r, latency: 1ms, bandwidth: 10Mbps}
events:
  - {at: 1s, link: [l, r], set: {bandwidth: 20Mbps}}
"""


class Plant:
    """Instances, cores and counters of one experiment; flows send what they
    want up to their class's effective rate, every period."""

    def __init__(self, text=DUMBBELL, netem=True):
        self.timeline = build_timeline(parse_text(text))
        self.instances = all_instances(self.timeline)
        ips = {n: f"10.0.0.{i + 2}" for i, n in enumerate(self.instances)}
        state = self.timeline.steps[0].state
        self.cores = {}
        for name in self.instances:
            core = EmulationCore(name, "eth0", "ns", ips, FakeTree, Shaping, netem=netem, wire_overhead=True)
            core.install(paths_from(state, name, self.instances))
            self.cores[name] = core
        self.codec = Codec(7, max(state.links) + 1, instances=len(self.instances), key=b"k" * 32)
        self.sender_ids = {n: i for i, n in enumerate(self.instances)}
        self.wants: dict[tuple[str, str], float] = {}
        self.sent: dict[tuple[str, str], int] = {}
        self.now_ns = 0

    def rate(self, src, dst):
        fields = self.cores[src].effective(dst)
        return 0 if fields is None else fields["rate_bps"]  # None: cut

    def loss(self, src, dst):
        return self.cores[src].effective(dst)["loss_ratio"]

    def advance(self, owned=None):
        """One period of traffic; the counters of the `owned` sources."""
        self.now_ns += PERIOD_NS
        for (src, dst), want in self.wants.items():
            sent = want if want <= self.rate(src, dst) else self.rate(src, dst)
            self.sent[(src, dst)] = self.sent.get((src, dst), 0) + int(sent * PERIOD_NS / 8e9)
        return {k: v for k, v in self.sent.items() if owned is None or k[0] in owned}

    def state(self):
        return self.timeline.state_at(self.now_ns // 1000)

    def loop(self, owned=None, wire=None, **settings):
        # The expected sequences below are worked out for these two.
        settings = {"window_periods": 2, "saturated_ratio": 0.8, **settings}
        owned = self.instances if owned is None else owned
        bus = MetadataBus(
            self.codec, {n: self.sender_ids[n] for n in owned}, wire, routes=Routes(self.timeline, self.instances)
        )
        return ShareLoop(owned, self.cores, bus, netem=True, settings=ShareSettings(**settings))

    def run(self, loop, periods, owned=None):
        trace = []
        for _ in range(periods):
            loop.tick(self.now_ns + PERIOD_NS, self.advance(owned), self.state())
            trace.append({k: self.rate(*k) for k in self.wants})
        return trace


def test_two_greedy_flows_split_the_bottleneck_then_the_survivor_takes_it_smoothly():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=0.5, queue_gain=0)  # rates only: no standing queues
    trace = plant.run(loop, 4)
    # Period 1 has no rate yet (one sample); period 2 cuts both at once.
    assert [t[("a", "ra")] for t in trace] == [10 * M, 5 * M, 5 * M, 5 * M]
    assert [t[("b", "rb")] for t in trace] == [10 * M, 5 * M, 5 * M, 5 * M]
    plant.wants[("b", "rb")] = 0
    trace = plant.run(loop, 8)
    # The stop shows in half the two-period window first (b at 2.5 of its 5:
    # no longer saturated, so a may have the rest), then b is inactive, and a
    # climbs half the way each period until within 2%, then lands on it.
    assert [t[("a", "ra")] for t in trace] == [
        6_250_000,
        8_125_000,
        9_062_500,
        9_531_250,
        9_765_625,
        10 * M,
        10 * M,
        10 * M,
    ]
    assert plant.cores["b"].overrides == {}  # stopped: back to its path
    assert plant.cores["a"].overrides == {}  # the whole link is its path's own rate


def test_gain_one_moves_in_a_single_period():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    plant.run(loop, 3)
    plant.wants[("b", "rb")] = 0
    assert [t[("a", "ra")] for t in plant.run(loop, 3)] == [7_500_000, 10 * M, 10 * M]


def test_access_limited_flow_keeps_its_rate_and_the_others_get_the_rest():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M, ("c", "rc"): 50 * M}
    trace = plant.run(plant.loop(increase_gain=1.0), 6)
    assert trace[-1] == {("a", "ra"): 4 * M, ("b", "rb"): 4 * M, ("c", "rc"): 2 * M}


def test_app_limited_flow_lends_its_spare_share():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 1 * M}
    trace = plant.run(plant.loop(increase_gain=1.0), 6)
    # b sends 1 of its 5: a may use the other 9; b keeps its own 5 to grow into.
    assert trace[-1] == {("a", "ra"): 9 * M, ("b", "rb"): 5 * M}


def test_link_rate_event_updates_capacity_from_the_timeline():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    plant.run(loop, 19)  # t = 0.95 s
    assert plant.rate("a", "ra") == 5 * M
    # At 1 s the bottleneck doubles: the cores get the new paths (as the
    # player does), the loop the new capacity.
    step = plant.timeline.steps[1]
    for src, dst in step.changed:
        plant.cores[src].apply({dst: step.state.path(src, dst)})
    trace = plant.run(loop, 4)
    assert trace[-1] == {("a", "ra"): 10 * M, ("b", "rb"): 10 * M}


def test_congestion_loss_hits_the_senders_above_their_share_and_is_lifted_after():
    plant = Plant()
    # Two unresponsive senders at 8 each and one that keeps to its share.
    plant.wants = {("a", "ra"): 8 * M, ("b", "rb"): 8 * M}
    loop = plant.loop(increase_gain=1.0)
    plant.run(loop, 2)
    # UDP keeps offering 8 whatever its class allows: model it by counting
    # the offered rate (the eBPF counters sit before the shaper).
    plant.rate = lambda src, dst: 100 * M
    plant.run(loop, 3)
    assert plant.cores["a"].overrides["ra"].rate_bps == 5 * M
    # 16 offered on 10: 6 too many; each is over its 5 (plus the 10% noise
    # forgiven) by 2.5, so each is charged its 2.5 of 8: 0.3125, set in
    # steps of 0.5% (round half to even: 0.31).
    assert plant.cores["a"].overrides["ra"].loss_ratio == pytest.approx(0.31)
    assert plant.loss("a", "ra") == pytest.approx(0.31)
    plant.wants = {("a", "ra"): 4 * M, ("b", "rb"): 4 * M}
    plant.run(loop, 3)
    assert plant.cores["a"].overrides.get("ra", Override()).loss_ratio == 0.0
    assert plant.loss("a", "ra") == 0.0


def test_no_loss_override_without_netem():
    plant = Plant(DUMBBELL.replace("latency: 1ms, ", ""), netem=False)
    plant.wants = {("a", "ra"): 8 * M, ("b", "rb"): 8 * M}
    loop = plant.loop(increase_gain=1.0)
    loop.netem = False
    plant.rate = lambda src, dst: 100 * M
    plant.run(loop, 4)
    assert plant.cores["a"].overrides["ra"] == Override(5 * M, 0.0)
    assert plant.cores["a"].tree.shapings["10.0.0.5"].loss_ratio == 0.0


class Wire:
    """Every manager's offers reach every other manager (and itself, as IPC would)."""

    def __init__(self, hub, name):
        self.hub, self.name = hub, name
        hub.setdefault("queues", {})[name] = []

    def offer(self, payload):
        for queue in self.hub["queues"].values():
            queue.append(payload)
        return 1

    def poll(self):
        queue = self.hub["queues"][self.name]
        out, queue[:] = list(queue), []
        return out


def test_two_managers_reach_the_shares_of_one():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M, ("c", "rc"): 50 * M}
    hub = {}
    left = plant.loop(["a", "ra", "rb"], Wire(hub, "left"), increase_gain=1.0)
    right = plant.loop(["b", "c", "rc"], Wire(hub, "right"), increase_gain=1.0)
    for _ in range(8):
        counters = plant.advance()
        for loop in (left, right):
            loop.tick(plant.now_ns, counters, plant.state())
    assert {k: plant.rate(*k) for k in plant.wants} == {("a", "ra"): 4 * M, ("b", "rb"): 4 * M, ("c", "rc"): 2 * M}
    assert left.bus.inbox.dropped["own"] > 0 and left.bus.inbox.accepted > 0


def test_a_core_that_moves_between_managers_is_counted_once_and_keeps_its_share():
    # Container mode: b's container restarts on the other node.
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    hub = {}
    left = plant.loop(["a"], Wire(hub, "left"), increase_gain=1.0)
    right = plant.loop(["b"], Wire(hub, "right"), increase_gain=1.0)

    def run(periods):
        rates = []
        for _ in range(periods):
            counters = plant.advance()
            for loop in (left, right):
                loop.tick(plant.now_ns, counters, plant.state())
            rates.append((plant.rate("a", "ra"), plant.rate("b", "rb")))
        return rates

    assert run(6)[-1] == (5 * M, 5 * M)
    sent_before = right.bus.counters.sent_messages
    right.bus.own({})  # b's old owner gives it up: one empty message says so
    right.own({})
    assert right.bus.counters.sent_messages == sent_before + 1
    plant.cores["b"].set_overrides({"rb": None})  # the new container's tree starts unshared
    left.bus.own({"a": plant.sender_ids["a"], "b": plant.sender_ids["b"]})
    left.own({"a": plant.cores["a"], "b": plant.cores["b"]})
    rates = run(12)  # until t=0.9 s: the bottleneck becomes 20 Mbit/s at 1 s
    # b's old announcements are forgotten, not counted next to b's own flow:
    # never a third of the link each.
    assert all(pair[0] >= 5 * M for pair in rates), rates
    assert rates[-1] == (5 * M, 5 * M)
    assert left.last["flows"] and all(f["local"] for f in left.last["flows"])


def test_a_replaced_core_forgets_the_overrides_of_the_old_one():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    plant.run(loop, 6)
    assert loop.applied[("a", "ra")].rate_bps == 5 * M
    fresh = EmulationCore(
        "a",
        "eth0",
        "ns2",
        {n: f"10.0.0.{i + 2}" for i, n in enumerate(plant.instances)},
        FakeTree,
        Shaping,
        netem=True,
        wire_overhead=True,
    )
    fresh.install(paths_from(plant.timeline.steps[0].state, "a", plant.instances))
    loop.own({**plant.cores, "a": fresh})
    assert ("a", "ra") not in loop.applied and ("b", "rb") in loop.applied
    plant.cores["a"] = fresh
    plant.run(loop, 3)
    assert plant.rate("a", "ra") == 5 * M  # pushed again into the new core


def test_a_silent_manager_expires_and_gives_its_capacity_back():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M}
    hub = {}
    loop = plant.loop(["a"], Wire(hub, "me"), increase_gain=1.0)
    # Another manager announces b's greedy flow once, then falls silent.
    b_path = plant.timeline.steps[0].state.path("b", "rb")
    hub["queues"]["me"].append(
        plant.codec.encode(Message(plant.sender_ids["b"], 1, (FlowReport(b_path.link_ids, 5 * M, saturated=True),)))
    )
    trace = plant.run(loop, 14, owned={"a"})
    rates = [t[("a", "ra")] for t in trace]
    assert rates[1:11] == [5 * M] * 10  # heard at period 1; 12 periods of silence expire it
    assert rates[-1] == 10 * M
    assert loop.bus.counters.expired_senders == 1


def test_garbage_on_the_wire_is_counted_and_ignored():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M}
    hub = {}
    loop = plant.loop(["a"], Wire(hub, "me"), increase_gain=1.0)
    hub["queues"]["me"] += [b"", b"XX" + bytes(20)]
    plant.run(loop, 3, owned={"a"})
    # Its own messages come back (as over IPC): the first, and the one that
    # announced the flow in period 2; period 3 changed nothing, so no send.
    assert dict(loop.bus.inbox.dropped) == {"short": 1, "foreign": 1, "own": 2}
    assert plant.rate("a", "ra") == 10 * M


def test_status_lists_flows_links_and_counters():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    plant.run(loop, 5)
    status = loop.status()
    flow = next(f for f in status["flows"] if f["src"] == "a")
    assert flow["dst"] == "ra" and flow["share_bps"] == 5 * M and flow["allowed_bps"] == 5 * M
    assert flow["saturated"] is True and flow["rtt_us"] == 6000
    bottleneck = next(link for link in status["links"] if link["capacity_bps"] == 10 * M)
    assert (bottleneck["src"], bottleneck["dst"]) == ("l", "r")
    assert bottleneck["utilisation"] == pytest.approx(1.0, abs=0.01)
    assert status["metadata"]["sent_messages"] == 0  # no wire: nothing sent


def test_cut_destination_loses_its_override_and_is_not_a_flow():
    plant = Plant()
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(increase_gain=1.0, queue_gain=0)
    plant.run(loop, 3)
    plant.cores["b"].apply({"rb": None})
    plant.wants[("b", "rb")] = 0
    plant.run(loop, 4)
    assert plant.cores["b"].overrides == {}
    assert plant.rate("a", "ra") == 10 * M


# ---- 6: the standing queues of full links ---------------------------------------


def test_what_crosses_a_full_link_waits_in_its_standing_queue_and_stops_waiting_when_it_drains(monkeypatch):
    monkeypatch.setitem(model.STANDING_QUEUE, "cubic", model.StandingQueue(0.6, 0.9))
    plant = Plant(DUMBBELL.replace("name: db}", "name: db, congestion-control: cubic}"))
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M, ("c", "rc"): 50 * M}
    loop = plant.loop(increase_gain=1.0, queue_gain=1.0, queue_every_periods=1)
    plant.run(loop, 3)
    # l -> r (10 Mbit/s) is full and holds back a and b (c is held by its own
    # 2 Mbit/s link, which it fills alone); each buffer is the longest round
    # trip across it (6 ms), at least 20 ms: with two flows, 0.9 - 0.3 / 2 =
    # 0.75 of it, 15 ms, with one 0.6, 12 ms.
    l_r, c_l = link_id(plant, "l", "r"), link_id(plant, "c", "l")
    assert loop.link_waits == {l_r: 15_000, c_l: 12_000}
    # a's and b's flows wait in their own classes; their other destinations
    # wait in l -> r's queue, c's in both (it fills its own link).  c's own
    # flow crosses l -> r without being held there, but it is saturated: its
    # delay is not moved under it.
    assert plant.cores["a"].overrides["ra"].queue_us == 0
    assert plant.cores["a"].overrides["rb"] == Override(queue_us=15_000)
    assert plant.cores["c"].overrides["ra"] == Override(queue_us=27_000)
    assert plant.cores["c"].overrides.get("rc", Override()).queue_us == 0
    assert plant.cores["c"].effective("ra")["delay_us"] == 3000 + 27_000
    # Nothing is full the other way (r -> l): no wait there.
    assert plant.cores["ra"].overrides == {}
    plant.wants = {}
    plant.run(loop, 4)
    assert loop.link_waits == {}
    assert all(core.overrides == {} for core in plant.cores.values())
    assert plant.cores["c"].effective("ra")["delay_us"] == 3000


def test_what_crosses_a_full_link_loses_its_drops_saturated_or_not_until_it_drains(monkeypatch):
    monkeypatch.setitem(model.STANDING_QUEUE, "cubic", model.StandingQueue(0.6, 0.9, ((1, 0.01), (2, 0.03))))
    plant = Plant(DUMBBELL.replace("name: db}", "name: db, congestion-control: cubic}"))
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M, ("c", "rc"): 50 * M}
    loop = plant.loop(increase_gain=1.0, queue_gain=1.0, queue_every_periods=1)
    plant.run(loop, 3)
    # l -> r holds a and b back (two flows: 3%), c -> l holds c's own flow
    # (one: 1%).  A flow loses nothing where it is held (its class's queue
    # drops for it): a's to ra; a's other destinations lose l -> r's 3%.
    # c's flow to rc is saturated, so it does not wait, but it crosses l -> r
    # without being held there and loses its 3%; c's other destinations
    # cross both: 1 - 0.99 x 0.97.
    assert plant.cores["a"].overrides.get("ra", Override()).drop_ratio == 0.0
    assert plant.cores["a"].overrides["rb"] == Override(queue_us=15_000, drop_ratio=0.03)
    assert plant.cores["c"].overrides["rc"].queue_us == 0
    assert plant.cores["c"].overrides["rc"].drop_ratio == 0.03
    assert plant.cores["c"].overrides["ra"] == Override(queue_us=27_000, drop_ratio=0.0397)
    # With netem, a path's loss compounds its own (none here) with them.
    assert plant.cores["c"].effective("ra")["loss_ratio"] == pytest.approx(0.0397)
    assert loop.status()["flows"][2]["queue_drop_ratio"] == 0.03  # c -> rc, as the status API shows it
    # b stops: l -> r holds a alone (1%); the destinations across it follow.
    plant.wants[("b", "rb")] = 0
    plant.run(loop, 6)
    assert plant.cores["a"].overrides["rb"].drop_ratio == 0.01
    assert plant.cores["c"].overrides["ra"].drop_ratio == pytest.approx(1 - 0.99 * 0.99)
    plant.wants = {}
    plant.run(loop, 4)
    assert all(core.overrides == {} for core in plant.cores.values())
    assert plant.cores["c"].effective("ra")["loss_ratio"] == 0.0


def test_a_flow_saturated_lately_keeps_its_delay(monkeypatch):
    monkeypatch.setitem(model.STANDING_QUEUE, "cubic", model.StandingQueue(0.6, 0.9))
    plant = Plant(DUMBBELL.replace("name: db}", "name: db, congestion-control: cubic}"))
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M, ("c", "rc"): 50 * M}
    loop = plant.loop(increase_gain=1.0, queue_gain=1.0, queue_every_periods=1, queue_hold_periods=4)
    plant.run(loop, 3)
    # c's flow falls to 0.5 of its 2 Mbit/s (a TCP flow after a loss, or an
    # RPC stream): no longer saturated, but it was: for 4 periods no wait;
    # then it waits in l -> r's queue (15 ms) like any other traffic across.
    plant.wants[("c", "rc")] = M // 2
    waits = []
    for _ in range(8):
        plant.run(loop, 1)
        waits.append(plant.cores["c"].overrides.get("rc", Override()).queue_us)
    # (From its first period under 0.8 of its allowance: the 2-period window
    # already averages 1.25 Mbit/s.)
    assert waits == [0, 0, 0, 0, 15_000, 15_000, 15_000, 15_000]


def test_a_wait_follows_its_link_by_the_gain_and_small_moves_are_not_pushed(monkeypatch):
    monkeypatch.setitem(model.STANDING_QUEUE, "reno", model.StandingQueue(0.3, 0.7))
    plant = Plant(DUMBBELL.replace("name: db}", "name: db, congestion-control: reno}"))
    plant.wants = {("a", "ra"): 50 * M, ("b", "rb"): 50 * M}
    loop = plant.loop(
        increase_gain=1.0, queue_gain=0.5, queue_push_us=2000, queue_push_ratio=0.1, queue_every_periods=1
    )
    waits = []
    for _ in range(7):
        plant.run(loop, 1)
        waits.append(plant.cores["c"].overrides.get("ra", Override()).queue_us)
    # Two flows: 0.7 - 0.4 / 2 = 0.5 of 20 ms: 10 ms.  Period 1 has one
    # sample (no rate yet); from period 2 the link is full and its wait goes
    # half the way each period: 5, 7.5, then 8.75 ms (1.25 ms more than
    # pushed: under 2 ms and 10%, not pushed), then 9.375, within 1 ms (half
    # a push) of 10: it lands there, 2.5 ms more than pushed.
    assert waits == [0, 5000, 7500, 7500, 10000, 10000, 10000]


def link_id(plant, src, dst):
    links = plant.timeline.steps[0].state.links
    return next(lid for lid, link in links.items() if (link.src, link.dst) == (src, dst))
