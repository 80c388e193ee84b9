"""The status API under load during a real local run (issue 15): 200
connections that never send a byte and 50 server-sent-event clients are
attached before t=0 of a run whose timeline has 30 events 100 ms apart.
/status keeps answering, every stream keeps receiving, each snapshot is
encoded once whoever reads it, and the events keep their time.  One run
(again if the host was not quiet, tests/host_timing.py), ~7 s each."""

from __future__ import annotations

import json
import re
import selectors
import socket
import threading
import time
import urllib.request

import pytest
from host_timing import quietest
from test_local_support import Cli, read_json, run_id_of

from collapsar.manager.play.scheduler import percentile

EVENTS = 30
IDLE, STREAMS = 200, 50
EVENT_LINES = "".join(
    f"  - {{at: {500 + 100 * i}ms, link: [a, sw], set: {{bandwidth: {10 + 10 * (i % 2)}Mbps}}}}\n"
    for i in range(EVENTS)
)
TOPOLOGY = f"""\
experiment: {{name: status-load}}
services:
  a: {{command: [sleep, "60"]}}
  b: {{command: [sleep, "60"]}}
  c: {{command: [sleep, "60"]}}
  d: {{command: [sleep, "60"]}}
bridges: [sw]
links:
  - {{from: a, to: sw, bandwidth: 100Mbps}}
  - {{from: b, to: sw, bandwidth: 100Mbps}}
  - {{from: c, to: sw, bandwidth: 100Mbps}}
  - {{from: d, to: sw, bandwidth: 100Mbps}}
events:
{EVENT_LINES}"""


class Load:
    """The attack, from this process: idle sockets, streams drained by one
    thread (counting their messages), /status asked every 100 ms."""

    def __init__(self, port: int):
        self.port = port
        self.idle: list[socket.socket] = []
        self.streams: dict[socket.socket, list] = {}  # -> [messages, tail of the last read]
        self.polls: list[tuple[float, object]] = []  # (seconds, HTTP status or the error)
        self._done = threading.Event()
        self._threads = [
            threading.Thread(target=self._drain, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]

    def attach(self) -> float:
        """Opens everything; returns how long that took (s)."""
        started = time.monotonic()
        for _ in range(IDLE):
            self.idle.append(socket.create_connection(("127.0.0.1", self.port), timeout=30))
        for _ in range(STREAMS):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.setblocking(False)
            self.streams[sock] = [0, b""]
        took = time.monotonic() - started
        for thread in self._threads:
            thread.start()
        return took

    def _drain(self) -> None:
        with selectors.DefaultSelector() as selector:
            for sock in self.streams:
                selector.register(sock, selectors.EVENT_READ)
            while not self._done.is_set():
                for key, _ in selector.select(0.1):
                    try:
                        data = key.fileobj.recv(1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:
                        selector.unregister(key.fileobj)
                        continue
                    seen = self.streams[key.fileobj]
                    text = seen[1] + data  # a message may straddle two reads
                    seen[0] += text.count(b"event: status\n")
                    seen[1] = text[-13:] if not text.endswith(b"\n") else b""

    def _poll(self) -> None:
        while not self._done.wait(0.1):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=10) as reply:
                    json.loads(reply.read())
                    outcome: object = reply.status
            except OSError as error:
                outcome = repr(error)
            self.polls.append((time.monotonic() - started, outcome))

    def close(self) -> None:
        self._done.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(15)
        for sock in [*self.idle, *self.streams]:
            sock.close()  # closing twice is harmless


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, (name, text)
    return float(match.group(1))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    def one_run():
        tmp = tmp_path_factory.mktemp("status-load")
        (tmp / "load.yaml").write_text(TOPOLOGY)
        cli = Cli(
            "run",
            str(tmp / "load.yaml"),
            "--duration",
            "4s",
            "--wait-start",
            "--subnet",
            "10.170.6.0/24",
            "--run-dir",
            str(tmp / "runs"),
            "--grace",
            "1s",
        )
        load = None
        try:
            cli.wait_line("waiting for start", 60)
            run_dir = tmp / "runs" / run_id_of(cli.lines)
            token = (run_dir / "control-token").read_text().strip()
            port = int((run_dir / "status-port").read_text())
            load = Load(port)
            attach_s = load.attach()
            start = urllib.request.Request(
                f"http://127.0.0.1:{port}/control/start",
                method="POST",
                data=b"{}",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(start, timeout=10) as reply:
                assert reply.status == 200
            time.sleep(3.6)  # the last event is at 3.4 s; the run stops at 4 s
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                metrics = reply.read().decode()
            load.close()  # before the run ends: a poll after it would find no server
            code, lines, stderr = cli.finish(60)
        finally:
            if load is not None:
                load.close()
            cli.kill()
        return {
            "code": code,
            "stderr": stderr,
            "dir": run_dir,
            "attach_s": attach_s,
            "polls": load.polls,
            "messages": [seen[0] for seen in load.streams.values()],
            "metrics": metrics,
        }

    result, host = quietest(one_run)
    late = [e["lateness_us"] for e in read_json(result["dir"] / "events.json")]
    slowest = max(seconds for seconds, _ in result["polls"])
    print(
        f"attach {result['attach_s']:.2f} s; /status polls {len(result['polls'])}, slowest "
        f"{slowest * 1000:.0f} ms; stream messages min {min(result['messages'])}; lateness p50 "
        f"{percentile(late, 0.5)} p99 {percentile(late, 0.99)} max {max(late)} us; {host}"
    )
    return {**result, "late": late, "host": host}


def test_run_ends_normally(run):
    assert run["code"] == 0, run["stderr"]


def test_connections_are_accepted_at_once(run):
    # The listen backlog holds a burst: no connection waits for a SYN retry (1 s).
    assert run["attach_s"] < 5.0


def test_status_keeps_answering(run):
    polls = run["polls"]
    assert len(polls) >= 10, polls
    assert all(outcome == 200 for _, outcome in polls), polls
    assert max(seconds for seconds, _ in polls) < 2.0, polls


def test_every_stream_keeps_receiving(run):
    # One message per 50 ms period over ~4 s: ~80; a stream served at all gets far more than 20.
    assert len(run["messages"]) == STREAMS and min(run["messages"]) >= 20, run["messages"]


def test_each_snapshot_is_encoded_once(run):
    metrics = run["metrics"]
    assert metric(metrics, "collapsar_status_streams") == STREAMS
    published = metric(metrics, "collapsar_status_snapshots_total")
    assert 0 < metric(metrics, "collapsar_status_snapshot_encodings_total") <= published


def test_events_keep_their_time(run):
    late, host = run["late"], run["host"]
    assert len(late) == EVENTS
    # Issue 15's bound, on top of how late this host woke a thread of the
    # timeline's priority during the run (as in test_local_run.py).
    assert min(late) >= 0 and percentile(late, 0.99) < 5_000 + host.max_us, (late, str(host))
