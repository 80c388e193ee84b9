"""The aggregator against real status servers on loopback (two 'managers')."""

import json
import time
import urllib.error
import urllib.request

import pytest

from collapsar.dashboard.aggregate import RECONNECT_S, Aggregator, Follower, manager_url, merge
from collapsar.errors import CollapsarError
from collapsar.manager.status.api import StatusBoard, StatusServer
from collapsar.manager.status.control import RunControl


def snapshot(run, t_us, instance, load_bps):
    return {
        "run_id": run,
        "t_us": t_us,
        "state": "running",
        "instances": [{"name": instance, "status": "up", "network": "up"}],
        "flows": [{"src": instance, "dst": "db", "rate_bps": load_bps}],
        "links": [
            {
                "id": 0,
                "present": True,
                "degraded": False,
                "up": {"rate_bps": 10_000_000, "load_bps": load_bps, "utilisation": 0.0},
            }
        ],
        "events": {"applied": [], "pending": 1, "upcoming": [{"at_us": 5, "label": "x"}]},
    }


class Manager:
    def __init__(self, token, instance, load_bps):
        self.calls = []
        self.board = StatusBoard()
        self.board.publish(snapshot("r1", 1000, instance, load_bps))
        control = RunControl(
            token,
            stop=lambda: self.calls.append("stop") or {"ok": True},
            link=lambda body: self.calls.append(body) or {"ok": True},
        )
        self.server = StatusServer(
            self.board, 0, control=control, topology=lambda: {"nodes": [{"id": instance}], "links": []}
        ).start()
        self.url = f"http://127.0.0.1:{self.server.port}"

    def close(self):
        self.board.close()
        self.server.stop()


@pytest.fixture
def managers():
    pair = [Manager("tok-a", "web", 2_000_000), Manager("tok-b", "web-2", 3_000_000)]
    yield pair
    for manager in pair:
        manager.close()


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_manager_url_accepts_what_the_run_prints():
    assert manager_url("http://127.0.0.1:8123/status") == "http://127.0.0.1:8123"
    assert manager_url(" http://10.0.0.5:80/ ") == "http://10.0.0.5:80"
    for bad in ("127.0.0.1:8123", "ftp://x:1", "http://", "http://h:1/other"):
        with pytest.raises(CollapsarError, match="expected a manager's status URL"):
            manager_url(bad)


def test_merge_sums_link_loads_and_tags_hosts():
    a, b = Follower("http://a:1", lambda: None), Follower("http://b:2", lambda: None)
    a.snapshot, b.snapshot = snapshot("r1", 10, "web", 2_000_000), snapshot("r1", 20, "web-2", 3_000_000)
    a.state = b.state = "up"
    merged = merge([a, b])
    assert merged["t_us"] == 20 and merged["state"] == "running"
    assert [(i["name"], i["host"]) for i in merged["instances"]] == [("web", "a:1"), ("web-2", "b:2")]
    assert merged["links"][0]["up"]["load_bps"] == 5_000_000
    assert merged["links"][0]["up"]["utilisation"] == 0.5
    assert a.snapshot["links"][0]["up"]["load_bps"] == 2_000_000  # inputs untouched


def test_merge_keeps_each_managers_own_shares_probe_and_workload():
    a, b = Follower("http://a:1", lambda: None), Follower("http://b:2", lambda: None)
    a.snapshot, b.snapshot = snapshot("r1", 10, "web", 2_000_000), snapshot("r1", 20, "web-2", 3_000_000)
    a.state = b.state = "up"
    a.snapshot["sharing"] = {
        "enabled": True,
        "flows": [
            {"src": "web", "dst": "db", "allowed_bps": 4_000_000, "local": True},
            {"src": "web-2", "dst": "db", "allowed_bps": 6_000_000, "local": False},  # b's, as a learned it
        ],
    }
    b.snapshot["sharing"] = {"enabled": True, "flows": [{"src": "web-2", "dst": "db", "allowed_bps": 6_000_000}]}
    b.snapshot["workload"] = [{"client": "web-2", "requests": {"ok": 3}}]
    merged = merge([a, b])
    assert merged["sharing"]["enabled"] is True
    assert [(f["src"], f["allowed_bps"], f["host"]) for f in merged["sharing"]["flows"]] == [
        ("web", 4_000_000, "a:1"),
        ("web-2", 6_000_000, "b:2"),
    ]
    assert merged["workload"] == [{"client": "web-2", "requests": {"ok": 3}, "host": "b:2"}]
    assert merged["probe"] == []


def test_merge_says_when_every_manager_is_gone():
    a = Follower("http://a:1", lambda: None)
    a.state, a.error = "unreachable", "ConnectionRefusedError"
    merged = merge([a])
    assert merged["state"] == "unreachable"
    assert merged["managers"][0]["error"] == "ConnectionRefusedError"


def test_follows_both_streams_and_notices_one_going_away(managers):
    board = StatusBoard()
    agg = Aggregator([m.url for m in managers], board).start()
    try:
        assert wait_for(lambda: len(board.snapshot()[1].get("instances", [])) == 2)
        assert agg.topology()["nodes"] == [{"id": "web"}]  # the first manager's
        managers[1].board.close()
        managers[1].server.stop()
        assert wait_for(lambda: [m["state"] for m in board.snapshot()[1]["managers"]] == ["up", "unreachable"])
    finally:
        agg.close()


def test_control_passes_the_page_token_to_every_manager(managers):
    agg = Aggregator([m.url for m in managers], StatusBoard())
    with pytest.raises(Exception) as refused:
        agg.handle("stop", {}, authorization="Bearer tok-a")  # right for one manager only
    assert refused.value.status == 401 and str(managers[1].server.port) in str(refused.value)
    assert managers[0].calls == ["stop"] and managers[1].calls == []


def test_control_with_manager_tokens_needs_the_dashboards_own(managers):
    agg = Aggregator([m.url for m in managers], StatusBoard(), ["tok-a", "tok-b"], "dash-tok")
    assert not agg.authorized("Bearer tok-a") and agg.authorized("Bearer dash-tok")
    change = {"link": ["a", "b"], "set": {"bandwidth": "1Mbps"}}
    reply = agg.handle("link", change, authorization="Bearer dash-tok")
    assert reply["ok"] and [m.calls for m in managers] == [[change], [change]]


def test_token_count_must_match():
    with pytest.raises(CollapsarError, match="one token for all, or one per --manager"):
        Aggregator(["http://a:1", "http://b:2", "http://c:3"], StatusBoard(), ["x", "y"], "d")


def test_served_like_a_manager(managers):
    """The page talks to the aggregator as to a manager: /stream, /topology, /control."""
    board = StatusBoard()
    agg = Aggregator([managers[0].url], board).start()
    server = StatusServer(board, 0, control=agg, topology=agg.topology).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert wait_for(lambda: board.snapshot()[1].get("instances"))
        with urllib.request.urlopen(base + "/status", timeout=5) as reply:
            assert json.loads(reply.read())["instances"][0]["host"].startswith("127.0.0.1:")
        request = urllib.request.Request(base + "/control/stop", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=5)
        assert error.value.code == 401
        request.add_header("Authorization", "Bearer tok-a")
        with urllib.request.urlopen(request, timeout=5) as reply:
            assert json.loads(reply.read())["ok"] is True
        assert managers[0].calls == ["stop"]
    finally:
        agg.close()
        board.close()
        server.stop()


# ---- a run's end -----------------------------------------------------------------


def ended(run, t_us, instance, at_unix, reason):
    end = {"at_unix": at_unix, "t_us": t_us, "reason": reason, "exit_code": 0, "run_dir": None, "report": None}
    return {**snapshot(run, t_us, instance, 0), "state": "ended", "end": end}


def test_a_manager_whose_run_ended_is_ended_not_unreachable(managers):
    board = StatusBoard()
    agg = Aggregator([managers[0].url], board).start()
    try:
        assert wait_for(lambda: board.snapshot()[1]["state"] == "running")
        last = ended("r1", 9_000_000, "web", 1700000000.5, "every command has exited")
        managers[0].board.publish(last)
        managers[0].close()
        assert wait_for(lambda: board.snapshot()[1]["state"] == "ended")
        time.sleep(RECONNECT_S + 0.5)  # a follower that tried again would now be unreachable
        merged = board.snapshot()[1]
        follower = agg.followers[0]
        assert (follower.state, follower.error) == ("ended", None)
        assert merged["managers"][0]["state"] == "ended" and merged["managers"][0]["end"] == last["end"]
        assert merged["end"] == last["end"] and merged["t_us"] == 9_000_000
        assert merged["instances"] == [{"name": "web", "status": "up", "network": "up", "host": follower.host}]
    finally:
        agg.close()


def test_merged_run_ends_when_every_managers_run_has():
    a, b = Follower("http://a:1", lambda: None), Follower("http://b:2", lambda: None)
    a.snapshot, a.state = ended("r1", 10, "web", 1700000001.0, "--duration reached"), "ended"
    b.snapshot, b.state = snapshot("r1", 20, "web-2", 3_000_000), "up"
    merged = merge([a, b])
    assert merged["state"] == "running" and "end" not in merged
    assert [m["end"] for m in merged["managers"]] == [a.snapshot["end"], None]
    b.snapshot, b.state = ended("r1", 30, "web-2", 1700000002.0, "stopped from the control API"), "ended"
    merged = merge([a, b])
    assert merged["state"] == "ended"
    assert merged["end"]["reason"] == "stopped from the control API"  # the last to end
    assert [m["state"] for m in merged["managers"]] == ["ended", "ended"]


def test_one_ended_and_the_other_unreachable_is_unreachable():
    a, b = Follower("http://a:1", lambda: None), Follower("http://b:2", lambda: None)
    a.snapshot, a.state = ended("r1", 10, "web", 1700000001.0, "--duration reached"), "ended"
    b.state, b.error = "unreachable", "ConnectionRefusedError"
    assert merge([a, b])["state"] == "unreachable"
    assert merge([])["state"] == "connecting"
