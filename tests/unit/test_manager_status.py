"""The status API over real HTTP on loopback."""

import json
import threading
import urllib.request

import pytest

from collapsar.manager.status import StatusBoard, StatusServer, metrics_text

SNAPSHOT = {
    "run_id": "a1b2c3", "t_us": 1500000, "state": "running",
    "instances": [{"name": "client", "ip": "10.77.0.2", "status": "up", "pid": 10},
                  {"name": "server", "ip": "10.77.0.3", "status": "crashed", "pid": None}],
    "throughput": [{"src": "client", "dst": "server", "bytes": 1000, "packets": 3,
                    "wire_bytes": 1072, "rate_bps": 8000}],
    "events": {"applied": [{"label": "x", "scheduled_us": 1, "applied_us": 3, "lateness_us": 2}],
               "pending": 4},
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
    assert first[0] == "event: status" and json.loads(first[1][len("data: "):])["t_us"] == 1500000
    threading.Timer(0.05, board.publish, args=({**SNAPSHOT, "t_us": 1550000},)).start()
    second = read_event()
    assert json.loads(second[1][len("data: "):])["t_us"] == 1550000
    reply.close()
