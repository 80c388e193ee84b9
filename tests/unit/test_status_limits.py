"""The status API's limits over real HTTP on loopback (issue 15): idle and
slow clients time out and free what they held, caps answer 503 instead of
refusing, a failing handler answers 500 and the server goes on, each
snapshot is encoded once and /paths built once per version."""

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from test_manager_status import SNAPSHOT, get, request

from collapsar.manager.status import streams
from collapsar.manager.status.api import StatusBoard, StatusServer, paths_rows
from collapsar.manager.status.control import RunControl
from collapsar.manager.status.guard import Limits
from collapsar.model import Path


def limited(board, limits, **kwargs):
    return StatusServer(board, 0, limits=limits, **kwargs).start()


def metric(srv, name):
    """One sample of /metrics, read over HTTP.  With a cap of two threads, a
    request's thread may hold its place a moment after its answer: a 503
    then is retried."""
    deadline = time.monotonic() + 5
    while True:
        status, _, body = request(srv, "GET", "/metrics")
        if status != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    text = body.decode()
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert status == 200 and match, (name, status, text)
    return float(match.group(1))


def closed_within(sock, seconds):
    """Reads until the server closes; how long that took (None: it did not)."""
    sock.settimeout(seconds)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def board():
    board = StatusBoard()
    board.publish(SNAPSHOT)
    yield board
    board.close()


def test_a_body_that_trickles_times_out_and_frees_its_thread(board):
    control = RunControl("tok", stop=lambda: {"ok": True})
    srv = limited(board, Limits(request_s=0.5), control=control)
    try:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(
            b"POST /control/stop HTTP/1.0\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer tok\r\nContent-Length: 100\r\n\r\n"
        )
        started, answer = time.monotonic(), b""
        sock.settimeout(0.1)
        while not answer and time.monotonic() - started < 5:
            sock.sendall(b"x")  # a byte every 0.1 s: no read waits long, the whole request does
            try:
                answer = sock.recv(4096)
            except TimeoutError:
                pass
        took = time.monotonic() - started
        sock.settimeout(5)
        try:
            while more := sock.recv(4096):  # the rest of the answer, to the server's close
                answer += more
        except ConnectionResetError:  # it closed on the bytes sent after its deadline
            pass
        sock.close()
        assert 0.4 <= took < 3.0 and answer.startswith(b"HTTP/1.0 408 ")
        assert b"request body not received in time (100 bytes announced)" in answer
        assert metric(srv, 'collapsar_status_timeouts_total{phase="request"}') == 1
        # Its thread gives its place back just after the close: this /metrics request alone.
        assert wait_for(lambda: metric(srv, "collapsar_status_connections") == 1)
    finally:
        srv.stop()


def test_idle_connections_hold_no_thread_and_are_closed(board):
    srv = limited(board, Limits(max_handlers=2, idle_s=1.0))
    try:
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(20)]
        assert json.loads(get(srv, "/status")[1]) == SNAPSHOT  # 20 idle, 2 threads: still served
        assert all(closed_within(sock, 5) is not None for sock in idle)
        for sock in idle:
            sock.close()
        assert metric(srv, 'collapsar_status_timeouts_total{phase="idle"}') == 20
    finally:
        srv.stop()


def test_over_the_connection_cap_a_503_not_a_refusal(board):
    srv = limited(board, Limits(max_handlers=2, request_s=10))
    try:
        # Two requests that have begun and not ended hold both threads.
        holders = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(2)]
        for sock in holders:
            sock.sendall(b"GET /status HTTP/1.0\r\n")
        assert wait_for(lambda: request(srv, "GET", "/status")[0] == 503)  # once both have begun
        status, head, body = request(srv, "GET", "/status")
        assert status == 503 and head["Retry-After"] == "1"
        assert "as many requests as it allows" in json.loads(body)["error"]
        # A body larger than the sockets' buffers is still being sent as
        # the 503 goes out: the client must get the 503, not a reset.
        assert request(srv, "POST", "/control/stop", b"x" * (32 << 20))[0] == 503
        for sock in holders:
            sock.close()
        assert wait_for(lambda: request(srv, "GET", "/status")[0] == 200)
        assert metric(srv, 'collapsar_status_rejected_total{reason="connections"}') >= 1
    finally:
        srv.stop()


def test_over_the_stream_cap_a_503(board):
    srv = limited(board, Limits(max_streams=1))
    try:
        first = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5)
        status, head, body = request(srv, "GET", "/stream")
        assert status == 503 and head["Retry-After"] == "5"
        assert json.loads(body)["error"] == (
            "every one of this API's 1 streams is taken; poll /status, or try again later"
        )
        assert metric(srv, "collapsar_status_streams") == 1
        assert metric(srv, 'collapsar_status_rejected_total{reason="streams"}') == 1
        first.close()
    finally:
        srv.stop()


def test_streams_hold_no_request_thread(board):
    srv = limited(board, Limits(max_handlers=2))

    def open_stream():
        """A stream's thread ends just after its answer begins: a request
        right then may still find both threads taken (503), never for long."""
        deadline = time.monotonic() + 5
        while True:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5)
            except urllib.error.HTTPError as error:
                if error.code != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    try:
        replies = [open_stream() for _ in range(5)]  # one thread each would need 5
        assert wait_for(lambda: request(srv, "GET", "/status")[0] == 200)

        def t_us_of(reply):
            lines = [reply.readline() for _ in range(3)]
            return json.loads(lines[1][len(b"data: ") :])["t_us"]

        assert [t_us_of(reply) for reply in replies] == [1500000] * 5  # the current one
        board.publish({**SNAPSHOT, "t_us": 1550000})
        assert [t_us_of(reply) for reply in replies] == [1550000] * 5  # then each new one
        for reply in replies:
            reply.close()
        assert wait_for(lambda: "collapsar_status_streams 0" in request(srv, "GET", "/metrics")[2].decode())
    finally:
        srv.stop()


def test_a_quiet_stream_gets_keep_alives_and_ends_with_the_board(board, monkeypatch):
    monkeypatch.setattr(streams, "KEEP_ALIVE_S", 0.3)
    srv = limited(board, Limits())
    try:
        reply = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5)
        assert [reply.readline() for _ in range(3)][0] == b"event: status\n"
        started = time.monotonic()
        assert [reply.readline(), reply.readline()] == [b": keep-alive\n", b"\n"]
        assert time.monotonic() - started < 3
        board.close()
        assert reply.read() == b""  # the run is over: the stream ends
    finally:
        srv.stop()


def test_past_the_waiting_cap_the_longest_idle_goes(board):
    srv = limited(board, Limits(max_waiting=5))
    try:
        idle = []
        for _ in range(8):
            idle.append(socket.create_connection(("127.0.0.1", srv.port)))
            time.sleep(0.02)  # accepted in this order
        assert all(closed_within(sock, 2) is not None for sock in idle[:3])
        assert all(closed_within(sock, 0.1) is None for sock in idle[3:])
        for sock in idle:
            sock.close()
        assert metric(srv, 'collapsar_status_rejected_total{reason="waiting"}') == 3
    finally:
        srv.stop()


def test_a_stream_that_stops_reading_is_dropped(board):
    srv = limited(board, Limits(write_s=0.5))
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
        sock.connect(("127.0.0.1", srv.port))
        sock.sendall(b"GET /stream HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        big = {**SNAPSHOT, "padding": "x" * 1_000_000}
        assert wait_for(
            lambda: board.publish(dict(big)) or metric(srv, 'collapsar_status_timeouts_total{phase="write"}') == 1, 20
        )
        assert wait_for(lambda: metric(srv, "collapsar_status_streams") == 0)
        sock.close()
    finally:
        srv.stop()


class Boom(ValueError):
    pass


def test_a_handler_that_raises_answers_500_and_the_server_goes_on(tmp_path, capsys):
    def paths():
        raise Boom("secret detail")

    def stop():
        raise RuntimeError("stop failed")

    board = StatusBoard(paths)
    board.publish(SNAPSHOT)
    log = tmp_path / "status-errors.txt"
    srv = limited(board, Limits(), control=RunControl("tok", stop=stop), error_log=log)
    try:
        for method, route in (("GET", "/paths"), ("POST", "/control/stop")):
            status, head, body = request(
                srv, method, route, b"" if method == "POST" else None, {"Authorization": "Bearer tok"}
            )
            assert status == 500 and head["Content-Type"] == "application/json"
            assert json.loads(body) == {
                "error": "internal error of the status API; the traceback is in the manager's log"
            }
        assert request(srv, "GET", "/status")[0] == 200
        assert metric(srv, "collapsar_status_errors_total") == 2
        text = log.read_text()
        assert "GET /paths failed" in text and "Boom: secret detail" in text
        assert "POST /control/stop failed" in text and "RuntimeError: stop failed" in text
        assert capsys.readouterr().err == (
            f"warning: status API: GET /paths failed; tracebacks in {log}\n"
        )  # once, not per failure
    finally:
        board.close()
        srv.stop()


def test_each_snapshot_is_encoded_once_whoever_reads_it(board):
    srv = limited(board, Limits())
    streams = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
    try:
        for sock in streams:
            sock.sendall(b"GET /stream HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        received = dict.fromkeys(streams, b"")

        def all_saw(t_us):
            for sock in streams:
                sock.settimeout(0.05)
                try:
                    received[sock] += sock.recv(1 << 16)
                except TimeoutError:
                    pass
            return all(f'"t_us": {t_us}'.encode() in data for data in received.values())

        assert wait_for(lambda: all_saw(1500000))
        for t_us in (1550000, 1600000):
            board.publish({**SNAPSHOT, "t_us": t_us})
            assert wait_for(lambda: all_saw(t_us))  # noqa: B023 - wait_for calls it before the loop goes on
            for _ in range(3):
                assert json.loads(get(srv, "/status")[1])["t_us"] == t_us
        assert board.encodings == 3  # 3 snapshots, each read by 5 streams and 3 GETs
        assert metric(srv, "collapsar_status_snapshot_encodings_total") == 3
        assert metric(srv, "collapsar_status_snapshots_total") == 3
    finally:
        for sock in streams:
            sock.close()
        srv.stop()


def test_paths_are_built_once_per_version():
    calls, version = [], [1]

    def paths():
        calls.append(1)
        time.sleep(0.05)  # long enough for the concurrent requests below to overlap
        return [{"src": "a", "dst": "b", "cut": True}]

    board = StatusBoard(paths, lambda: version[0])
    srv = limited(board, Limits())
    try:
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(get(srv, "/paths")[1])) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(calls) == 1 and [json.loads(a) for a in answers] == [json.loads(answers[0])] * 8
        version[0] = 2
        get(srv, "/paths")
        get(srv, "/paths")
        assert len(calls) == 2
    finally:
        board.close()
        srv.stop()


def test_paths_rows_from_a_copy():
    ab = Path("a", "b", delay_us=0, jitter_us=0, loss_ratio=0.0, rate_bps=10_000_000, link_ids=())
    rows = paths_rows([("a", {"c": None, "b": ab}, set()), ("b", {"a": ab}, {"a"})])
    assert rows == [
        {
            "src": "a",
            "dst": "b",
            "cut": False,
            "delay_us": 0,
            "jitter_us": 0,
            "loss_ratio": 0.0,
            "rate_bps": 10_000_000,
        },
        {"src": "a", "dst": "c", "cut": True},
        {"src": "b", "dst": "a", "cut": True},
    ]
