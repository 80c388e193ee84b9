"""The status API over real HTTP on loopback."""

import json
import threading
import urllib.request

import pytest

from collapsar.manager.status.api import StatusBoard, StatusServer, metrics_text

SNAPSHOT = {
    "run_id": "a1b2c3",
    "t_us": 1500000,
    "state": "running",
    "instances": [
        {"name": "client", "ip": "10.77.0.2", "status": "up", "pid": 10},
        {"name": "server", "ip": "10.77.0.3", "status": "crashed", "pid": None},
    ],
    "throughput": [
        {"src": "client", "dst": "server", "bytes": 1000, "packets": 3, "wire_bytes": 1072, "rate_bps": 8000}
    ],
    "events": {"applied": [{"label": "x", "scheduled_us": 1, "applied_us": 3, "lateness_us": 2}], "pending": 4},
}


@pytest.fixture
def server():
    board = StatusBoard(lambda: [{"src": "client", "dst": "server", "cut": True}])
    board.publish(SNAPSHOT)
    srv = StatusServer(board, 0).start()
    yield board, srv
    board.close()
    srv.stop()


def get(srv, route):
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{route}", timeout=5) as reply:
        return reply.headers["Content-Type"], reply.read().decode()


def test_status_paths_events(server):
    board, srv = server
    kind, body = get(srv, "/status")
    assert kind == "application/json" and json.loads(body) == SNAPSHOT
    assert json.loads(get(srv, "/paths")[1]) == [{"src": "client", "dst": "server", "cut": True}]
    assert json.loads(get(srv, "/events")[1])["pending"] == 4


def test_unknown_route_is_404(server):
    _, srv = server
    with pytest.raises(urllib.error.HTTPError) as error:
        get(srv, "/nope")
    assert error.value.code == 404


def test_metrics_text():
    text = metrics_text(SNAPSHOT)
    assert 'collapsar_instance_up{instance="client",status="up"} 1' in text
    assert 'collapsar_instance_up{instance="server",status="crashed"} 0' in text
    assert 'collapsar_throughput_bps{src="client",dst="server"} 8000' in text
    assert 'collapsar_sent_bytes_total{src="client",dst="server"} 1000' in text
    assert "collapsar_events_pending 4" in text and "collapsar_event_lateness_max_us 2" in text


LIVE = {
    **SNAPSHOT,
    "source": 'topo "x".yaml',
    "mode": "local",
    "flows": [{"src": "client", "dst": "server", "rate_bps": 8000, "configured_bps": 20_000_000, "cut": False}],
    "sharing": {
        "enabled": True,
        "flows": [
            {
                "src": "client",
                "dst": "server",
                "local": True,
                "allowed_bps": 10_000_000,
                "congestion_loss_ratio": 0.015,
            },
            {"src": "sender 7", "dst": "x", "local": False, "allowed_bps": None, "congestion_loss_ratio": 0.0},
        ],
    },
    "links": [
        {
            "id": 0,
            "a": "client",
            "b": "sw",
            "present": True,
            "degraded": False,
            "up": {"rate_bps": 20_000_000, "load_bps": 8000, "utilisation": 0.0004},
            "down": {"rate_bps": None, "load_bps": 0, "utilisation": None},
        }
    ],
    "events": {
        "applied": [{"lateness_us": 80}, {"lateness_us": 900}, {"lateness_us": 3_000}, {"lateness_us": 2_000_000}],
        "pending": 1,
    },
}


def test_metrics_name_every_figure_a_run_shows_live():
    lines = metrics_text(LIVE).splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    pair = '{src="client",dst="server"}'
    up = '{link="0",a="client",b="sw",direction="up"}'
    for expected in (
        'collapsar_run_info{run_id="a1b2c3",source="topo \\"x\\".yaml",mode="local",state="running"} 1',
        "collapsar_experiment_time_seconds 1.5",
        f"collapsar_flow_rate_bits_per_second{pair} 8000",
        f"collapsar_flow_configured_bits_per_second{pair} 20000000",
        f"collapsar_flow_cut{pair} 0",
        f"collapsar_flow_share_bits_per_second{pair} 10000000",
        f"collapsar_flow_congestion_loss_ratio{pair} 0.015",
        f"collapsar_link_load_bits_per_second{up} 8000",
        f"collapsar_link_capacity_bits_per_second{up} 20000000",
        f"collapsar_link_utilisation_ratio{up} 0.0004",
        'collapsar_link_load_bits_per_second{link="0",a="client",b="sw",direction="down"} 0',
        "collapsar_events_applied 4",
        'collapsar_event_lateness_seconds_bucket{le="0.0001"} 1',
        'collapsar_event_lateness_seconds_bucket{le="0.001"} 2',
        'collapsar_event_lateness_seconds_bucket{le="0.005"} 3',
        'collapsar_event_lateness_seconds_bucket{le="1"} 3',
        'collapsar_event_lateness_seconds_bucket{le="+Inf"} 4',
        "collapsar_event_lateness_seconds_sum 2.00398",
        "collapsar_event_lateness_seconds_count 4",
    ):
        assert expected in samples, expected
    # an unlimited direction has no capacity or utilisation sample; a remote
    # flow (another host's) no share of ours
    assert not any('direction="down"' in line and "capacity" in line for line in samples)
    assert not any('src="sender 7"' in line for line in samples)
    # every family has its HELP and TYPE once, before its samples
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families))
    for line in samples:
        name = line.split("{")[0].split(" ")[0]
        base = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        assert name in families or base in families, line


def test_stream_sends_current_then_each_new_snapshot(server):
    board, srv = server
    reply = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5)
    assert reply.headers["Content-Type"] == "text/event-stream"

    def read_event():
        lines = []
        while (line := reply.readline().decode()) != "\n":
            lines.append(line.strip())
        return lines

    first = read_event()
    assert first[0] == "event: status" and json.loads(first[1][len("data: ") :])["t_us"] == 1500000
    threading.Timer(0.05, board.publish, args=({**SNAPSHOT, "t_us": 1550000},)).start()
    second = read_event()
    assert json.loads(second[1][len("data: ") :])["t_us"] == 1550000
    reply.close()


# ---- control, topology and the page ---------------------------------------------

from http.client import HTTPConnection  # noqa: E402 - grouped with the tests that use it

from collapsar.manager.status.control import ControlRefused, RunControl  # noqa: E402


class Calls:
    def __init__(self):
        self.seen = []

    def stop(self):
        self.seen.append("stop")
        return {"ok": True, "state": "stopping"}

    def link(self, body):
        if body.get("set") == {"bandwidth": "bad"}:
            raise ControlRefused(400, "link change refused: bandwidth: expected a rate")
        self.seen.append(("link", body))
        return {"ok": True}


@pytest.fixture
def control_server(tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><title>x</title>")
    (tmp_path / "app.js").write_text("console.log(1)")
    (tmp_path.parent / "secret.txt").write_text("no")
    calls = Calls()
    control = RunControl("tok-123", start=None, stop=calls.stop, link=calls.link)
    board = StatusBoard()
    board.publish(SNAPSHOT)
    srv = StatusServer(board, 0, control=control, topology=lambda: {"nodes": [1], "links": []}, assets=tmp_path).start()
    yield srv, calls
    board.close()
    srv.stop()


def request(srv, method, route, body=None, headers=None):
    conn = HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request(method, route, body=body, headers=headers or {})
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, dict(reply.getheaders()), data


def test_control_without_or_with_a_wrong_token_is_401(control_server):
    srv, calls = control_server
    for headers in ({}, {"Authorization": "Bearer tok-12"}, {"Authorization": "tok-123"}):
        status, head, body = request(srv, "POST", "/control/stop", b"{}", headers)
        assert status == 401 and head["WWW-Authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in json.loads(body)["error"]
    assert calls.seen == []


def test_control_with_the_token(control_server):
    srv, calls = control_server
    auth = {"Authorization": "Bearer tok-123"}
    assert request(srv, "POST", "/control/stop", b"", auth)[0] == 200
    change = {"link": ["a", "b"], "set": {"bandwidth": "5Mbps"}}
    status, _, body = request(srv, "POST", "/control/link", json.dumps(change).encode(), auth)
    assert status == 200 and json.loads(body) == {"ok": True}
    assert calls.seen == ["stop", ("link", change)]


@pytest.mark.parametrize(
    "route, body, code, words",
    [
        ("/control/link", b"{not json", 400, "not JSON"),
        (
            "/control/link",
            json.dumps({"link": ["a", "b"], "set": {"bandwidth": "bad"}}).encode(),
            400,
            "expected a rate",
        ),
        ("/control/start", b"{}", 409, "--wait-start"),
        ("/control/run", b'{"cmd": "id"}', 404, "expected one of start, stop, link"),
        ("/control/link", b"x" * (64 * 1024 + 1), 413, "over 65536 bytes"),
    ],
)
def test_control_errors_are_one_json_line(control_server, route, body, code, words):
    srv, _ = control_server
    status, head, data = request(srv, "POST", route, body, {"Authorization": "Bearer tok-123"})
    assert status == code and head["Content-Type"] == "application/json"
    assert words in json.loads(data)["error"]


def test_post_elsewhere_is_404_even_with_the_token(control_server):
    srv, _ = control_server
    assert request(srv, "POST", "/status", b"{}", {"Authorization": "Bearer tok-123"})[0] == 404


def test_foreign_host_header_is_refused(control_server):
    srv, _ = control_server
    status, _, body = request(srv, "GET", "/status", headers={"Host": "evil.example:80"})
    assert status == 403 and "loopback names only" in json.loads(body)["error"]
    assert request(srv, "GET", "/status", headers={"Host": f"localhost:{srv.port}"})[0] == 200


def test_topology_and_page(control_server):
    srv, _ = control_server
    status, _, body = request(srv, "GET", "/topology")
    assert status == 200 and json.loads(body) == {"nodes": [1], "links": []}
    status, head, body = request(srv, "GET", "/dashboard/")
    assert status == 200 and head["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in head["Content-Security-Policy"] and body.startswith(b"<!doctype")
    status, head, _ = request(srv, "GET", "/dashboard/app.js")
    assert status == 200 and head["Content-Type"].startswith(("text/javascript", "application/javascript"))
    assert request(srv, "GET", "/dashboard")[1]["Location"] == "/dashboard/"


@pytest.mark.parametrize(
    "route",
    ["/dashboard/../secret.txt", "/dashboard/%2e%2e/secret.txt", "/dashboard/nope.js", "/dashboard//etc/passwd"],
)
def test_page_files_only(control_server, route):
    srv, _ = control_server
    assert request(srv, "GET", route)[0] == 404


def test_without_control_or_page_those_routes_are_404(server):
    _, srv = server
    assert request(srv, "POST", "/control/stop", b"{}", {"Authorization": "Bearer x"})[0] == 404
    assert request(srv, "GET", "/dashboard/")[0] == 404
    assert request(srv, "GET", "/topology")[0] == 404


def test_metrics_of_the_live_probe_and_the_workload():
    snapshot = {
        "probe": [
            {"src": "a", "dst": "b", "rtt_ms": 20.5, "requests": 10, "replies": 9, "configured_rtt_ms": 20.0},
            {"src": "b", "dst": "c", "rtt_ms": 1.0, "requests": 3, "replies": 3, "configured_rtt_ms": None},
        ],
        "workload": [
            {
                "client": "wc",
                "requests": {"ok": 3, "err": 1, "timeout": 0},
                "latency_buckets_s": [0.001, 0.01],
                "latency_cumulative": [1, 2],
                "latency_count": 3,
                "latency_sum_s": 0.5115,
            }
        ],
    }
    lines = metrics_text(snapshot).splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    for expected in (
        'collapsar_probe_rtt_seconds{src="a",dst="b"} 0.0205',
        'collapsar_probe_configured_rtt_seconds{src="a",dst="b"} 0.02',
        'collapsar_probe_requests_total{src="a",dst="b"} 10',
        'collapsar_probe_replies_total{src="a",dst="b"} 9',
        'collapsar_workload_requests_total{client="wc",status="ok"} 3',
        'collapsar_workload_requests_total{client="wc",status="err"} 1',
        'collapsar_workload_latency_seconds_bucket{client="wc",le="0.001"} 1',
        'collapsar_workload_latency_seconds_bucket{client="wc",le="0.01"} 2',
        'collapsar_workload_latency_seconds_bucket{client="wc",le="+Inf"} 3',
        'collapsar_workload_latency_seconds_sum{client="wc"} 0.5115',
        'collapsar_workload_latency_seconds_count{client="wc"} 3',
    ):
        assert expected in samples, expected
    assert not any(line.startswith('collapsar_probe_configured_rtt_seconds{src="b"') for line in samples)
    assert "# TYPE collapsar_workload_latency_seconds histogram" in lines
