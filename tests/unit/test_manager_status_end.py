"""The status API's last word (issue 19): a run's final snapshot says it
ended, when and why, reaches every open stream before the API stops, and
a client that does not read holds the run's exit back by FLUSH_S at most."""

import io
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_manager_fakes import FakeState, full_mesh, timeline_of

from collapsar.errors import InstanceFailure, RunError
from collapsar.manager.run.options import RunOptions
from collapsar.manager.run.skeleton import ManagerRun
from collapsar.manager.run.snapshot import end_of_run, run_state
from collapsar.manager.status import streams
from collapsar.manager.status.api import StatusBoard, StatusServer

FLOW = {"src": "a", "dst": "b", "rate_bps": 8000, "bytes": 1000}


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("every command has exited", "every command has exited"),
        ("duration reached", "--duration reached"),
        ("stop requested through the control API", "stopped from the control API"),
        ("SIGINT", "interrupted (Ctrl-C, SIGINT)"),
        ("SIGTERM", "interrupted (SIGTERM)"),
        ("SIGHUP", "interrupted (SIGHUP: its terminal closed)"),
        ("the bootstrapper is gone", "the bootstrapper is gone"),
    ],
)
def test_end_says_why_the_run_stopped(stop_reason, reason):
    end = end_of_run(stop_reason, None, 2_500_000, 1700000000.1234, None)
    assert end == {
        "at_unix": 1700000000.123,
        "t_us": 2_500_000,
        "reason": reason,
        "exit_code": 0,
        "run_dir": None,
        "report": None,
    }


def test_end_names_the_report_of_the_run_directory():
    end = end_of_run("duration reached", None, 0, 1.0, Path("/var/lib/collapsar/runs/my run"))
    assert end["run_dir"] == "/var/lib/collapsar/runs/my run"
    assert end["report"] == {
        "command": "collapsar report '/var/lib/collapsar/runs/my run'",
        "path": "/var/lib/collapsar/runs/my run/report.html",
    }


def test_end_of_a_failed_run_gives_the_first_line_and_the_exit_status():
    failure = InstanceFailure(["instance c: exited with status 3 on its own; the last lines of logs/c.err:", "  c| x"])
    end = end_of_run("every command has exited", failure, 0, 1.0, None)
    assert end["reason"] == (
        "every command has exited; failed: instance c: exited with status 3 on its own; the last lines of logs/c.err"
    )
    assert end["exit_code"] == 6
    assert end_of_run(None, RunError("no bridge"), 0, 1.0, None)["reason"] == "failed: no bridge"
    bug = end_of_run(None, KeyError("x"), 0, 1.0, None)
    assert (bug["reason"], bug["exit_code"]) == ("failed: KeyError: 'x'", 1)
    assert end_of_run(None, KeyboardInterrupt(), 0, 1.0, None)["exit_code"] == 130


class Runtime:
    mode = "local"

    def pids(self):
        return {}

    def exits(self):
        return []

    def close(self):
        return []


class ShortRun(ManagerRun):
    """Nothing to shape: the status API, a stream the test opened, then
    `done` once `done_at_us` is reached (or bring-up fails, or the verdict)."""

    def __init__(self, done_at_us=100_000, failure=None, verdict_error=None, results=None):
        state = FakeState(["a", "b"], full_mesh(["a", "b"]))
        experiment = SimpleNamespace(settings=SimpleNamespace(period_us=20_000), source="t.yaml")
        tcal = SimpleNamespace(check_kernel=lambda need_netem: None)
        super().__init__(experiment, timeline_of([(0, (), state)]), RunOptions(), Runtime(), tcal, io.StringIO())
        self.run_id = "r1"
        self.done_at_us, self.bring_up_failure, self.verdict_error = done_at_us, failure, verdict_error
        self.results = results
        self.listening = threading.Event()  # the test's stream has its first snapshot
        self.events: list[dict] = []

    def bring_up(self):
        self.server = StatusServer(self.board, 0).start()
        self.board.publish(self.snapshot(0))
        threading.Thread(target=self._listen, daemon=True).start()
        assert self.listening.wait(5)
        if self.bring_up_failure is not None:
            raise self.bring_up_failure
        self.begin()

    def _listen(self):
        """Every event of one /stream until the server closes it."""
        assert self.server is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.server.port}/stream", timeout=10) as reply:
            for line in reply:
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[len(b"data: ") :]))
                    self.listening.set()

    def places(self):
        return {}

    def snapshot(self, now_us):
        return {"run_id": self.run_id, "t_us": now_us, "state": run_state(self), "flows": [FLOW]}

    def done(self, now_us):
        return "every command has exited" if now_us >= self.done_at_us else None

    def results_dir(self):
        return self.results

    def verdict(self):
        if self.verdict_error is not None:
            raise self.verdict_error


def last_event(run):
    deadline = time.monotonic() + 5
    while not (run.events and run.events[-1]["state"] == "ended") and time.monotonic() < deadline:
        time.sleep(0.01)
    return run.events[-1]


def test_an_open_stream_gets_the_runs_end_before_the_api_stops(tmp_path):
    run = ShortRun(results=tmp_path / "run1")
    before = time.time()
    assert run.run() == 0
    last = last_event(run)
    assert [e["state"] for e in run.events[-2:]] == ["running", "ended"]
    assert last["flows"] == [FLOW]  # the final values stay on screen
    end = last["end"]
    assert end["reason"] == "every command has exited" and end["exit_code"] == 0
    assert 100_000 <= end["t_us"] < 1_000_000 and last["t_us"] == end["t_us"]
    assert before <= end["at_unix"] <= time.time()
    assert end["run_dir"] == str(tmp_path / "run1")
    assert end["report"]["command"] == f"collapsar report {tmp_path / 'run1'}"
    assert json.loads(run.board.encoded().body) == last  # what /status served last


def test_a_run_that_fails_says_so_in_its_end():
    run = ShortRun(failure=RunError("the bridge went away"))
    with pytest.raises(RunError):
        run.run()
    end = last_event(run)["end"]
    assert (end["reason"], end["exit_code"], end["t_us"]) == ("failed: the bridge went away", 5, 0)
    assert end["report"] is None


def test_a_verdict_that_fails_is_in_the_end_and_raised_after_teardown():
    failure = InstanceFailure(["instance b: exited with status 2 on its own; its log is empty"])
    run = ShortRun(verdict_error=failure)
    with pytest.raises(InstanceFailure):
        run.run()
    end = last_event(run)["end"]
    assert end["reason"] == (
        "every command has exited; failed: instance b: exited with status 2 on its own; its log is empty"
    )
    assert end["exit_code"] == 6


def test_a_stream_that_does_not_read_holds_the_end_back_by_flush_s_at_most():
    board = StatusBoard()
    board.publish({"state": "running", "t_us": 0})
    srv = StatusServer(board, 0).start()
    try:
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", srv.port))
        stuck.sendall(b"GET /stream HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        reader = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5)
        assert reader.readline() == b"event: status\n"
        read: list[bytes] = []
        reading = threading.Thread(target=lambda: read.append(reader.read()))
        reading.start()
        time.sleep(0.3)  # both streams handed over to the streams' thread
        board.publish({"state": "running", "t_us": 1, "padding": "x" * 4_000_000})  # more than the kernel buffers
        time.sleep(0.3)  # sent: half of it waits for the stuck stream
        board.publish({"state": "ended", "t_us": 2, "end": {"reason": "--duration reached"}})
        started = time.monotonic()
        board.close()
        srv.stop()
        took_s = time.monotonic() - started
        reading.join(5)
        assert read[0].decode().rstrip("\n").endswith('"end": {"reason": "--duration reached"}}')
        assert streams.FLUSH_S <= took_s < streams.FLUSH_S + 0.5
        stuck.close()
    finally:
        board.close()
        srv.stop()


def test_a_stream_that_joins_after_the_end_gets_it_and_is_closed():
    board = StatusBoard()
    srv = StatusServer(board, 0).start()
    try:
        board.publish({"state": "ended", "t_us": 5, "end": {"reason": "x"}})
        board.close()
        time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/stream", timeout=5) as reply:
            body = reply.read().decode()  # returns: the server closed it
        assert body == 'event: status\ndata: {"state": "ended", "t_us": 5, "end": {"reason": "x"}}\n\n'
    finally:
        srv.stop()


def test_publish_end_needs_no_status_api():
    """--status-port -1: nothing reads the board, nothing is published."""
    run = ShortRun()
    assert [what for what, _ in run.closing_stages()] == ["close the status board"]
