"""The status API on 127.0.0.1: JSON, a server-sent-events stream, Prometheus.

  GET /status   instances, measured throughput, events applied/pending (JSON)
  GET /paths    configured path of every instance pair (JSON; can be large)
  GET /events   the event log: scheduled, applied, lateness (JSON)
  GET /stream   server-sent events: one `status` message per manager tick
  GET /metrics  Prometheus text format

The manager's loop publishes a fresh snapshot each period (`StatusBoard`);
handlers only read published snapshots, so a slow client never touches the
emulation's own state.  Bound to loopback only: the API has no
authentication.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class StatusBoard:
    def __init__(self, paths: Callable[[], list[dict]] = lambda: []):
        self._cond = threading.Condition()
        self._snapshot: dict = {"state": "starting"}
        self._version = 0
        self._closed = False
        self.paths = paths  # built on request: O(instances^2)

    def publish(self, snapshot: dict) -> None:
        with self._cond:
            self._snapshot = snapshot
            self._version += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def snapshot(self) -> tuple[int, dict]:
        with self._cond:
            return self._version, self._snapshot

    def wait_newer(self, version: int, timeout_s: float) -> tuple[int, dict] | None:
        """The next snapshot after `version`, or None when closed or timed out."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._closed, timeout_s)
            if self._closed or self._version == version:
                return None
            return self._version, self._snapshot


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(snapshot: dict) -> str:
    """Prometheus exposition format from one snapshot."""
    out = ["# HELP collapsar_instance_up 1 if the instance's command is running",
           "# TYPE collapsar_instance_up gauge"]
    for inst in snapshot.get("instances", []):
        out.append(f'collapsar_instance_up{{instance="{_label(inst["name"])}",'
                   f'status="{_label(inst["status"])}"}} {1 if inst["status"] == "up" else 0}')
    out += ["# HELP collapsar_sent_bytes_total Bytes sent per destination (eBPF counters)",
            "# TYPE collapsar_sent_bytes_total counter"]
    flows = snapshot.get("throughput", [])
    for flow in flows:
        out.append(f'collapsar_sent_bytes_total{{src="{_label(flow["src"])}",'
                   f'dst="{_label(flow["dst"])}"}} {flow["bytes"]}')
    out += ["# HELP collapsar_throughput_bps Measured send rate per destination over the last period",
            "# TYPE collapsar_throughput_bps gauge"]
    for flow in flows:
        out.append(f'collapsar_throughput_bps{{src="{_label(flow["src"])}",'
                   f'dst="{_label(flow["dst"])}"}} {flow["rate_bps"]}')
    events = snapshot.get("events", {})
    out += ["# HELP collapsar_events_applied Timeline steps applied so far",
            "# TYPE collapsar_events_applied gauge",
            f"collapsar_events_applied {len(events.get('applied', []))}",
            "# HELP collapsar_events_pending Timeline steps still to come",
            "# TYPE collapsar_events_pending gauge",
            f"collapsar_events_pending {events.get('pending', 0)}",
            "# HELP collapsar_event_lateness_max_us Largest lateness of an applied step",
            "# TYPE collapsar_event_lateness_max_us gauge",
            f"collapsar_event_lateness_max_us "
            f"{max((e['lateness_us'] for e in events.get('applied', [])), default=0)}",
            "# HELP collapsar_experiment_time_us Time since t=0 of the experiment",
            "# TYPE collapsar_experiment_time_us gauge",
            f"collapsar_experiment_time_us {snapshot.get('t_us', 0)}"]
    return "\n".join(out) + "\n"


class _Handler(BaseHTTPRequestHandler):
    board: StatusBoard  # set on the subclass made per server

    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
        pass  # the manager's stderr is for the user, not for access logs

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value: object) -> None:
        self._send(200, json.dumps(value).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        route = self.path.split("?", 1)[0].rstrip("/") or "/"
        _, snapshot = self.board.snapshot()
        if route in ("/", "/status"):
            self._json(snapshot)
        elif route == "/paths":
            self._json(self.board.paths())
        elif route == "/events":
            self._json(snapshot.get("events", {}))
        elif route == "/metrics":
            self._send(200, metrics_text(snapshot).encode(), "text/plain; version=0.0.4")
        elif route == "/stream":
            self._stream()
        else:
            self._send(404, b'{"error": "no such endpoint; try /status, /paths, /events, '
                       b'/stream, /metrics"}', "application/json")

    def _stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        version, snapshot = self.board.snapshot()
        try:
            while True:
                self.wfile.write(b"event: status\ndata: " + json.dumps(snapshot).encode() + b"\n\n")
                self.wfile.flush()
                newer = self.board.wait_newer(version, timeout_s=15.0)
                if newer is None:
                    if self.board.closed:
                        return
                    self.wfile.write(b": keep-alive\n\n")  # comment line: keeps proxies from timing out
                    continue
                version, snapshot = newer
        except (BrokenPipeError, ConnectionResetError):
            return


class StatusServer:
    def __init__(self, board: StatusBoard, port: int = 0):
        handler = type("Handler", (_Handler,), {"board": board})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="status", daemon=True)

    def start(self) -> "StatusServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
