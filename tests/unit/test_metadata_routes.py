"""What an authentic message may say: only the collapsed paths of its sender's
instance, one flow per destination (share_routes.Routes); and what the bus
lets through per period (share_bus.MetadataBus): the newest message of each
sender, checked against the timeline.  Also the one line a manager says
about dropped messages, once per kind however many arrive."""

import threading
import time

import pytest

from collapsar.manager.sharing.bus import MetadataBus
from collapsar.manager.sharing.local import ManagerSharing
from collapsar.manager.sharing.metadata import Codec, FlowReport, Message
from collapsar.manager.sharing.routes import Routes
from collapsar.parser import parse_text
from collapsar.timeline import build_timeline

KEY = b"the run's key, thirty-two bytes!"
TEXT = """
experiment: {name: routes}
services:
  a: {command: [x]}
  b: {command: [x]}
  c: {command: [x]}
bridges: [s1, s2, s3]
links:
  - {from: a, to: s1, latency: 1ms, bandwidth: 100Mbps}
  - {from: s1, to: s2, latency: 1ms, bandwidth: 100Mbps}
  - {from: s1, to: s3, latency: 5ms, bandwidth: 100Mbps}
  - {from: s3, to: s2, latency: 5ms, bandwidth: 100Mbps}
  - {from: s2, to: b, latency: 1ms, bandwidth: 100Mbps}
  - {from: s2, to: c, latency: 1ms, bandwidth: 100Mbps}
events:
  - {at: 1s, link: [s1, s2], action: leave}
  - {at: 2s, link: [s2, b], set: {bandwidth: 50Mbps}}
  - {at: 3s, link: [s2, c], set: {bandwidth: 50Mbps}}
  - {at: 4s, link: [s1, s2], action: join}
"""
A, B, C = 0, 1, 2  # sender ids: the instances in run order
# Link ids (the run graph numbers each direction): a->s1 0, s1->s2 2,
# s1->s3 4, s3->s2 6, s2->b 8, s2->c 10; b->s2 9, s2->s1 3, s1->a 1.
DIRECT_AB, DETOUR_AB = (0, 2, 8), (0, 4, 6, 8)  # s1-s2 is gone from 1 s to 4 s
DIRECT_AC = (0, 2, 10)
BA = (9, 3, 1)


@pytest.fixture(scope="module")
def timeline():
    return build_timeline(parse_text(TEXT))


def flows(*paths):
    return tuple(FlowReport(path, 5_000_000) for path in paths)


def check(routes, timeline, step, sender, *paths):
    return routes.check(Message(sender, 1, flows(*paths)), timeline.steps[step].state)


def test_the_paths_of_the_sender_now_pass(timeline):
    routes = Routes(timeline, ["a", "b", "c"])
    assert timeline.steps[0].state.path("a", "b").link_ids == DIRECT_AB
    assert timeline.steps[2].state.path("a", "b").link_ids == DETOUR_AB
    assert check(routes, timeline, 0, A, DIRECT_AB, DIRECT_AC) is None
    assert check(routes, timeline, 2, A, DETOUR_AB) is None
    assert check(routes, timeline, 0, B, BA) is None
    assert check(routes, timeline, 0, A) is None  # no flow: how a stop is announced


def test_a_path_of_the_step_before_or_after_passes_one_two_steps_away_does_not(timeline):
    # Managers apply a step at nearly the same moment, each on its own clock.
    routes = Routes(timeline, ["a", "b", "c"])
    assert check(routes, timeline, 0, A, DETOUR_AB) is None  # step 1's: a sender one step ahead
    # Step 3's (which left a->b alone, so step 2's path): a sender one step behind.
    assert check(routes, timeline, 4, A, DETOUR_AB) is None
    assert check(routes, timeline, 2, A, DIRECT_AB) == "path"  # steps 1, 2 and 3 all detour
    assert check(routes, timeline, 2, A, DIRECT_AC) == "path"


@pytest.mark.parametrize(
    "sender,paths,why",
    [
        (A, [BA], "another instance's path"),
        (B, [DIRECT_AB], "a path from a, claimed by b"),
        (A, [(0,)], "ends at a switch, not an instance"),
        (A, [(0, 2)], "ends at a switch, not an instance"),
        (A, [(2, 8)], "does not start at a"),
        (A, [(0, 2, 7, 6, 8)], "a loop through s3 on the way to b"),
        (A, [(4, 6, 8)], "starts at a switch"),
        (A, [DIRECT_AB, DIRECT_AB], "the same destination twice"),
        (A, [DIRECT_AB, DETOUR_AB], "two paths to one destination: b's flow counted twice"),
        (A, [(9, 3, 1)], "a path back to a itself, from b"),
    ],
)
def test_flows_that_are_not_paths_of_the_sender_are_refused(timeline, sender, paths, why):
    assert check(Routes(timeline, ["a", "b", "c"]), timeline, 0, sender, *paths) == "path", why


def test_a_state_outside_the_timeline_is_checked_on_its_own(timeline):
    # The control API rebuilds the timeline: its states are new objects.
    rebuilt = build_timeline(parse_text(TEXT))
    routes = Routes(timeline, ["a", "b", "c"])
    assert routes.check(Message(A, 1, flows(DIRECT_AB)), rebuilt.steps[0].state) is None
    assert routes.check(Message(A, 1, flows(DETOUR_AB)), rebuilt.steps[0].state) == "path"
    assert routes.check(Message(A, 1, flows(DETOUR_AB)), rebuilt.steps[2].state) is None


# ---- the bus: newest per sender per period, flows checked ------------------------


class ListWire:
    def __init__(self):
        self.inbound: list[bytes] = []
        self.sent: list[bytes] = []

    def offer(self, payload):
        self.sent.append(payload)
        return 1

    def poll(self):
        out, self.inbound = self.inbound, []
        return out


def bus_for(timeline, own):
    codec = Codec(7, 12, instances=3, key=KEY)
    wire = ListWire()
    return codec, wire, MetadataBus(codec, own, wire, routes=Routes(timeline, ["a", "b", "c"]))


def test_of_a_senders_messages_in_one_period_only_the_newest_counts(timeline):
    codec, wire, bus = bus_for(timeline, {"c": C})
    wire.inbound = [codec.encode(Message(A, s, flows(DIRECT_AB), epoch=5)) for s in range(1, 40)]
    wire.inbound.append(codec.encode(Message(A, 40, flows(DIRECT_AB, DIRECT_AC), epoch=5)))
    heard = bus.receive(1, timeline.steps[0].state)
    assert heard == {A: flows(DIRECT_AB, DIRECT_AC)}
    status = bus.status()
    assert (status["accepted_messages"], status["superseded_messages"], status["dropped_messages"]) == (1, 39, {})


def test_a_message_with_a_non_path_flow_is_dropped_whole_and_counted(timeline):
    codec, wire, bus = bus_for(timeline, {"c": C})
    wire.inbound = [codec.encode(Message(A, 1, flows(DIRECT_AB), epoch=5))]
    assert bus.receive(1, timeline.steps[0].state) == {A: flows(DIRECT_AB)}
    # An authentic sender that names b's access link as its own flow.
    wire.inbound = [codec.encode(Message(A, 2, flows(DIRECT_AC, BA), epoch=5))]
    assert bus.receive(2, timeline.steps[0].state) == {A: flows(DIRECT_AB)}  # what it said before stands
    assert bus.status()["dropped_messages"] == {"path": 1} and bus.status()["accepted_messages"] == 1


def test_forged_and_replayed_messages_leave_the_flows_as_they_were(timeline):
    codec, wire, bus = bus_for(timeline, {"c": C})
    genuine = codec.encode(Message(A, 1, flows(DIRECT_AB), epoch=5))
    forger = Codec(7, 12, instances=3, key=b"a guess at the key, 32 bytes ..")
    wire.inbound = [genuine]
    bus.receive(1, timeline.steps[0].state)
    wire.inbound = [codec.encode(Message(A, 2, (), epoch=5))]  # a's flow stopped
    assert bus.receive(2, timeline.steps[0].state) == {A: ()}
    wire.inbound = [genuine] * 3 + [forger.encode(Message(A, 99, flows(DIRECT_AB, DIRECT_AC), epoch=6))] * 5
    assert bus.receive(3, timeline.steps[0].state) == {A: ()}
    assert bus.status()["dropped_messages"] == {"stale": 3, "forged": 5}


def test_a_flood_of_forged_messages_costs_one_tag_each(timeline):
    codec, wire, bus = bus_for(timeline, {"c": C})
    forger = Codec(7, 12, instances=3, key=b"a guess at the key, 32 bytes ..")
    forged = forger.encode(Message(A, 1, flows(DIRECT_AB, DIRECT_AC)))
    wire.inbound = [forged] * 20_000 + [codec.encode(Message(A, 1, flows(DIRECT_AB)))]
    began = time.process_time()
    assert bus.receive(1, timeline.steps[0].state) == {A: flows(DIRECT_AB)}
    per_message_us = (time.process_time() - began) / 20_001 * 1e6
    assert bus.status()["dropped_messages"] == {"forged": 20_000}
    # Measured 3-4 us on this project's 2-core VM; the bound leaves room for a busy host.
    assert per_message_us < 50, per_message_us


def test_a_manager_reports_each_kind_of_drop_once(timeline):
    said = []
    sharing = ManagerSharing(
        source=TEXT,
        instances=["a", "b", "c"],
        cores={},
        netem=False,
        timeline=timeline,
        key=KEY,
        lock=threading.Lock(),
        aeron_dir="-",
        log_path=None,
        say=said.append,
        aeron=False,
    )
    wire = ListWire()
    sharing.bus.wire = wire  # what Aeron would hand over
    forger = Codec(sharing.bus.codec.experiment_tag, 12, instances=3, key=b"a guess at the key, 32 bytes ..")
    for period in range(5):
        wire.inbound = [forger.encode(Message(A, period, ()))] * 100 + [b"XX" + bytes(30)]
        sharing.tick(period * 50_000, [], timeline.steps[0].state)
    assert sharing.bus.status()["dropped_messages"] == {"forged": 500, "foreign": 5}
    assert said == [
        "warning: sharing: dropped a metadata message (forged: its authentication tag does not match this "
        "run's key (not from a manager of this run)); such messages are counted in the status "
        "(sharing.metadata.dropped_messages), not reported again",
        "warning: sharing: dropped a metadata message (foreign: another run's or another program's message); "
        "such messages are counted in the status (sharing.metadata.dropped_messages), not reported again",
    ]
