"""The status API on 127.0.0.1: JSON, a server-sent-events stream, Prometheus,
and (when a run or the dashboard gives them) the control actions and the web page.

  GET  /status      instances, measured throughput, events applied/pending (JSON)
  GET  /paths       configured path of every instance pair (JSON; can be large)
  GET  /events      the event log: scheduled, applied, lateness (JSON)
  GET  /topology    services, bridges and links as written (JSON, for the dashboard)
  GET  /stream      server-sent events: one `status` message per manager tick
  GET  /metrics     Prometheus text format
  GET  /dashboard/  the web page (static assets built from dashboard/web)
  POST /control/ACTION  start, stop, link (collapsar.manager.control): bearer token

The manager's loop publishes a fresh snapshot each period (`StatusBoard`);
handlers only read published snapshots, so a slow client never touches the
emulation's own state.  GETs are open but bound to loopback by default, and
a request whose Host header names another machine is refused there (a web
page elsewhere cannot reach the API by DNS rebinding); POSTs need the token.
"""

from __future__ import annotations

import json
import mimetypes
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from .control import MAX_BODY_BYTES, ControlRefused, RunControl

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# The page loads its own bundle and talks to its own origin only.
PAGE_POLICY = ("default-src 'self'; img-src 'self' data:; style-src 'self'; "
               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


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
    # Set on the subclass made per server:
    board: StatusBoard
    control: RunControl | None = None
    topology: Callable[[], dict] | None = None
    assets: Path | None = None
    loopback_only = True

    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
        pass  # the manager's stderr is for the user, not for access logs

    def _send(self, code: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value: object, code: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(value).encode(), "application/json", headers)

    def _host_ok(self) -> bool:
        if not self.loopback_only:
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name in LOOPBACK_HOSTS:
            return True
        self._json({"error": f"Host {host[:60]!r} refused: this API answers loopback names only"},
                   403)
        return False

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if not self._host_ok():
            return
        route = self.path.split("?", 1)[0]
        if route.startswith("/dashboard/") and self.assets is not None:
            self._asset(route[len("/dashboard/"):])
            return
        route = route.rstrip("/") or "/"
        _, snapshot = self.board.snapshot()
        if route == "/dashboard" and self.assets is not None:
            self._send(302, b"", "text/plain", {"Location": "/dashboard/"})
        elif route in ("/", "/status"):
            self._json(snapshot)
        elif route == "/paths":
            self._json(self.board.paths())
        elif route == "/events":
            self._json(snapshot.get("events", {}))
        elif route == "/topology" and self.topology is not None:
            self._json(self.topology())
        elif route == "/metrics":
            self._send(200, metrics_text(snapshot).encode(), "text/plain; version=0.0.4")
        elif route == "/stream":
            self._stream()
        else:
            self._json({"error": "no such endpoint; try /status, /paths, /events, /topology, "
                                 "/stream, /metrics, /dashboard/"}, 404)

    def _asset(self, name: str) -> None:
        """A file of the built page; names are looked up, never joined blindly."""
        name = name or "index.html"
        root = self.assets.resolve()
        target = (root / name).resolve()
        if root not in target.parents or not target.is_file():
            self._json({"error": f"no such dashboard file {name[:60]!r}"}, 404)
            return
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind == "application/javascript":
            kind += "; charset=utf-8"
        self._send(200, target.read_bytes(), kind, {"Content-Security-Policy": PAGE_POLICY})

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        if not self._host_ok():
            return
        route = self.path.split("?", 1)[0].rstrip("/")
        if not route.startswith("/control/") or self.control is None:
            self._json({"error": "no such endpoint; control actions are POST /control/start, "
                                 "/control/stop, /control/link"}, 404)
            return
        if not self.control.authorized(self.headers.get("Authorization")):
            self._json({"error": "control needs Authorization: Bearer <token>; `collapsar run` "
                                 "prints the token and writes it to RUNDIR/control-token"}, 401,
                       {"WWW-Authenticate": 'Bearer realm="collapsar"'})
            return
        try:
            body = self._body()
            self._json(self.control.handle(route[len("/control/"):], body,
                                           authorization=self.headers.get("Authorization")))
        except ControlRefused as refused:
            self._json({"error": str(refused)}, refused.status)

    def _body(self) -> object:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ControlRefused(400, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise ControlRefused(413, f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise ControlRefused(400, f"request body is not JSON: {error}") from None

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
    def __init__(self, board: StatusBoard, port: int = 0, bind: str = "127.0.0.1",
                 control: RunControl | None = None, topology: Callable[[], dict] | None = None,
                 assets: Path | None = None):
        handler = type("Handler", (_Handler,), {
            "board": board, "control": control, "topology": staticmethod(topology) if topology
            else None, "assets": assets, "loopback_only": bind.startswith("127.") or bind == "::1"})
        self._server = ThreadingHTTPServer((bind, port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="status", daemon=True)  # quick shutdown()

    def start(self) -> "StatusServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
