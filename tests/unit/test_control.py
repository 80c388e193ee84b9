"""Control actions: tokens, request checks, ad-hoc link changes re-parsed and
replayed on a real timeline (collapsar.timeline) with a recording actuator."""

import os
import stat
import time

import pytest

from collapsar.manager.play.live import LivePlayer
from collapsar.manager.status.control import (
    AdHocLinks,
    ControlRefused,
    RunControl,
    bearer_matches,
    read_change,
    with_events,
    write_token,
)
from collapsar.parser import parse_text
from collapsar.timeline import build_timeline

# A rate-only star; at 0.4 s the uplink of c2 drops to 5 Mbit/s.
STAR = """
experiment: {name: star}
services:
  c1: {command: [sleep, "1"]}
  c2: {command: [sleep, "1"]}
  srv: {command: [sleep, "1"]}
bridges: [sw]
links:
  - {from: c1, to: sw, bandwidth: 50Mbps}
  - {from: c2, to: sw, bandwidth: 20Mbps}
  - {from: sw, to: srv, bandwidth: 1Gbps}
events:
  - {at: 400ms, link: [c2, sw], set: {bandwidth: 5Mbps}}
"""
WITH_DELAY = STAR.replace("bandwidth: 50Mbps}", "bandwidth: 50Mbps, latency: 2ms}")


class Recorder:
    def __init__(self):
        self.paths = []

    def set_paths(self, src, paths):
        self.paths.append((src, dict(paths)))

    def start_instance(self, instance):
        pass

    def stop_instance(self, instance):
        pass

    def kill_instance(self, instance):
        pass

    def mark_instance(self, instance, status):
        pass

    def rate(self, src, dst):
        """The last rate set for src -> dst, or None if never set."""
        for s, paths in reversed(self.paths):
            if s == src and dst in paths:
                return paths[dst].rate_bps
        return None


def live(text=STAR, netem=False):
    timeline = build_timeline(parse_text(text, "star.yaml"))
    recorder = Recorder()
    player = LivePlayer(timeline, recorder)
    return player, recorder, AdHocLinks(text, "star.yaml", player, netem)


# ---- tokens and the action table ----------------------------------------------


def test_bearer_matches_only_the_exact_token():
    assert bearer_matches("Bearer s3cret", "s3cret")
    assert not bearer_matches("Bearer s3cre", "s3cret")
    assert not bearer_matches("bearer s3cret", "s3cret")
    assert not bearer_matches("s3cret", "s3cret")
    assert not bearer_matches(None, "s3cret")
    assert not bearer_matches("Bearer ", "s3cret")


def test_token_file_is_owner_only(tmp_path):
    path = write_token(tmp_path, "abc")
    assert path.read_text() == "abc\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FileExistsError):  # never overwritten in place
        write_token(tmp_path, "other")


def test_actions_unknown_and_unavailable():
    control = RunControl("t", start=None, stop=lambda: {"ok": True}, link=lambda body: body)
    with pytest.raises(ControlRefused) as unknown:
        control.handle("exec", {"cmd": "id"})
    assert unknown.value.status == 404 and "start, stop, link" in str(unknown.value)
    with pytest.raises(ControlRefused) as start:
        control.handle("start", None)
    assert start.value.status == 409 and "--wait-start" in str(start.value)
    assert control.handle("stop", None) == {"ok": True}
    assert control.handle("link", {"x": 1}) == {"x": 1}


@pytest.mark.parametrize(
    "body, words",
    [
        ([1, 2], "expected a JSON object"),
        ({"link": ["a", "b"], "set": {"bandwidth": "1Mbps"}, "at": "5s"}, "unexpected key 'at'"),
        ({"link": ["a"], "set": {"bandwidth": "1Mbps"}}, '"link" must name the two ends'),
        ({"link": ["a", 3], "set": {"bandwidth": "1Mbps"}}, '"link" must name the two ends'),
        ({"link": ["a", "b"], "set": {}}, '"set" must be an object'),
        ({"link": ["a", "b"]}, '"set" must be an object'),
    ],
)
def test_request_shape_is_checked_first(body, words):
    with pytest.raises(ControlRefused) as refused:
        read_change(body)
    assert refused.value.status == 400 and words in str(refused.value)


# ---- the parser checks the change -------------------------------------------------


def test_change_appended_as_a_set_event_of_the_file():
    experiment = with_events(
        STAR, "star.yaml", [{"at": "100000us", "link": ["c1", "sw"], "set": {"bandwidth": "10Mbps"}}]
    )
    sets = [(e.at_us, e.a, e.b, dict(e.up)) for e in experiment.events]
    assert sets == [(100_000, "c1", "sw", {"rate_bps": 10_000_000}), (400_000, "c2", "sw", {"rate_bps": 5_000_000})]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"link": ["c1", "nowhere"], "set": {"bandwidth": "1Mbps"}}, "unknown element 'nowhere'"),
        ({"link": ["c1", "srv"], "set": {"bandwidth": "1Mbps"}}, "there is no link between c1 and srv"),
        ({"link": ["c1", "sw"], "set": {"bandwidth": "7 parsecs"}}, "bandwidth: expected a rate"),
        ({"link": ["c1", "sw"], "set": {"colour": "red"}}, "unknown key 'colour'"),
        ({"link": ["c1", "sw"], "set": {"command": ["sh", "-c", "id"]}}, "unknown key 'command'"),
    ],
)
def test_bad_changes_get_the_parsers_message(change, words):
    _, _, adhoc = live()
    with pytest.raises(ControlRefused) as refused:
        adhoc.apply(change)
    assert refused.value.status == 400
    assert str(refused.value).startswith("link change refused: ") and words in str(refused.value)
    assert adhoc.changes == []


def test_jitter_above_latency_is_refused_like_in_a_file():
    _, _, adhoc = live(WITH_DELAY, netem=True)
    with pytest.raises(ControlRefused) as refused:
        adhoc.apply({"link": ["c1", "sw"], "set": {"jitter": "5ms"}})
    assert "must not exceed the latency" in str(refused.value)


def test_delay_in_a_rate_only_run_is_refused():
    _, _, adhoc = live()
    with pytest.raises(ControlRefused) as refused:
        adhoc.apply({"link": ["c1", "sw"], "set": {"latency": "50ms"}})
    assert refused.value.status == 400 and "htb, no netem" in str(refused.value)


# ---- the change reaches the paths and stays ---------------------------------------


def test_change_before_start_goes_onto_t0_shaping_and_is_logged():
    player, recorder, adhoc = live()
    reply = adhoc.apply({"link": ["c1", "sw"], "set": {"bandwidth": "10Mbps"}})
    assert reply["at_us"] == 0 and reply["label"] == "ad-hoc: link c1 -- sw set bandwidth=10Mbps"
    assert recorder.rate("c1", "srv") == 10_000_000 and recorder.rate("c1", "c2") == 10_000_000
    assert recorder.rate("srv", "c2") is None  # untouched pairs are not re-sent
    assert [(e.label, e.adhoc) for e in player.log] == [("ad-hoc: link c1 -- sw set bandwidth=10Mbps", True)]


def test_change_mid_run_persists_past_a_later_event_on_another_link():
    player, recorder, adhoc = live()
    player.start()
    time.sleep(0.1)
    reply = adhoc.apply({"link": ["c1", "sw"], "set": {"bandwidth": "10Mbps"}})
    assert 50_000 < reply["at_us"] < 400_000
    deadline = time.monotonic() + 3
    while player.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    player.stop()
    log = player.log
    assert [(e.adhoc, e.error) for e in log] == [(True, None), (False, None)]
    assert log[0].scheduled_us == reply["at_us"] and log[1].scheduled_us == 400_000
    assert [e.index for e in log] == [0, 1]
    # After the 400 ms step: c2's link is 5 Mbit/s, c1's stays at the ad-hoc 10.
    assert recorder.rate("c2", "srv") == 5_000_000
    assert recorder.rate("c1", "c2") == 5_000_000
    assert player.timeline.state_at(500_000).path("c1", "srv").rate_bps == 10_000_000


def test_pending_during_a_change_counts_the_paused_steps():
    # The status loop may read pending between pause and replace (a change
    # being applied): it must see the file's 400 ms step as still to come,
    # not the empty stand-in segment (a kernel test once saw pending 0 there
    # and went on before the step fired).
    player, _, _ = live()
    player.start()
    time.sleep(0.05)
    with player.lock:
        applied = player.pause()
        assert player.pending == 1
        assert [step["at_us"] for step in player.upcoming()] == [400_000]
        player.resume(applied)
    assert player.pending == 1
    deadline = time.monotonic() + 3
    while player.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    player.stop()
    assert [e.label for e in player.log] == ["link c2 -- sw set"]


def test_later_set_of_the_same_property_wins():
    player, recorder, adhoc = live()
    player.start()
    time.sleep(0.05)
    adhoc.apply({"link": ["c2", "sw"], "set": {"bandwidth": "2Mbps"}})
    assert recorder.rate("c2", "srv") == 2_000_000
    time.sleep(0.5)
    player.stop()
    assert recorder.rate("c2", "srv") == 5_000_000  # the file's 400 ms event still applies


def test_refused_change_leaves_the_timeline_playing():
    player, _, adhoc = live()
    player.start()
    with pytest.raises(ControlRefused):
        adhoc.apply({"link": ["c1", "sw"], "set": {"bandwidth": "nope"}})
    time.sleep(0.5)
    player.stop()
    assert [e.label for e in player.log] == ["link c2 -- sw set"]


def test_no_change_once_the_run_stops():
    player, recorder, adhoc = live()
    player.start()
    player.stop()
    with pytest.raises(ControlRefused) as refused:
        adhoc.apply({"link": ["c1", "sw"], "set": {"bandwidth": "10Mbps"}})
    assert refused.value.status == 409 and "stopping" in str(refused.value)
    assert recorder.paths == [] and adhoc.changes == []
