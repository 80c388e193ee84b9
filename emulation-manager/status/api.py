"""The status API on 127.0.0.1: JSON, a server-sent-events stream, Prometheus,
and (when a run or the dashboard gives them) the control actions and the web page.

  GET  /status      instances, measured throughput, events applied/pending (JSON)
  GET  /paths       configured path of every instance pair (JSON; can be large)
  GET  /events      the event log: scheduled, applied, lateness (JSON)
  GET  /topology    services, bridges and links as written (JSON, for the dashboard)
  GET  /stream      server-sent events: one `status` message per manager tick;
                    a run's last one, state "ended", says when and why
  GET  /metrics     Prometheus text format
  GET  /dashboard/  the web page (static assets built from dashboard/web)
  POST /control/ACTION  start, stop, link (collapsar.manager.status.control): bearer token

The manager's loop publishes a fresh snapshot each period (`StatusBoard`,
status/board.py); handlers only read published snapshots, so a slow client never
touches the emulation's own state, and each snapshot is encoded once for
all of them.  Timeouts, caps and the 500 of a failed handler: status/guard.py.
GETs are open but bound to loopback by default, and
a request whose Host header names another machine is refused there (a web
page elsewhere cannot reach the API by DNS rebinding); POSTs need the token.
"""

from __future__ import annotations

import ipaddress
import json
import mimetypes
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from collapsar.manager.status.board import StatusBoard, paths_rows  # noqa: F401 - runs and the dashboard take them from here
from collapsar.manager.status.control import MAX_BODY_BYTES, ControlHandler, ControlRefused
from collapsar.manager.status.guard import GuardedHandler, GuardedHTTPServer, Limits
from collapsar.manager.status.metrics import metrics_text
from collapsar.manager.status.streams import Streams

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def binds_loopback(bind: str) -> bool:
    """Whether `bind` (an address, or a name such as localhost) names only
    loopback addresses: then Host headers are checked, against DNS rebinding."""
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(bind, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):  # the server cannot bind it either, and says so
        return False
    return bool(found) and all(ipaddress.ip_address(str(ip).split("%")[0]).is_loopback for ip in found)


# The page loads its own bundle and talks to its own origin only.
PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


class _Handler(GuardedHandler):
    # Set on the subclass made per server:
    board: StatusBoard
    streams: Streams
    control: ControlHandler | None = None
    topology: Callable[[], dict] | None = None
    assets: Path | None = None
    loopback_only = True
    bind_name = ""  # a name such as this host's, that resolves to loopback: a Host it answers too

    def log_message(self, format, *args) -> None:  # noqa: A002 - the stdlib's name
        pass  # the manager's stderr is for the user, not for access logs

    def _send(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
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
        if name in LOOPBACK_HOSTS or name == self.bind_name:
            return True
        self._json({"error": f"Host {host[:60]!r} refused: this API answers loopback names only"}, 403)
        return False

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if not self._host_ok():
            return
        route = self.path.split("?", 1)[0]
        if route.startswith("/dashboard/") and self.assets is not None:
            self._asset(route[len("/dashboard/") :])
            return
        route = route.rstrip("/") or "/"
        _, snapshot = self.board.snapshot()
        if route == "/dashboard" and self.assets is not None:
            self._send(302, b"", "text/plain", {"Location": "/dashboard/"})
        elif route in ("/", "/status"):
            self._send(200, self.board.encoded().body, "application/json")
        elif route == "/paths":
            self._send(200, self.board.paths_body(), "application/json")
        elif route == "/events":
            self._json(snapshot.get("events", {}))
        elif route == "/topology" and self.topology is not None:
            self._json(self.topology())
        elif route == "/metrics":
            text = (
                metrics_text(snapshot) + self.board.metrics() + self.server.metrics(streams=self.streams.slots.in_use)
            )
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        elif route == "/stream":
            self._stream()
        else:
            self._json(
                {"error": "no such endpoint; try /status, /paths, /events, /topology, /stream, /metrics, /dashboard/"},
                404,
            )

    def _asset(self, name: str) -> None:
        """A file of the built page; names are looked up, never joined blindly."""
        name = name or "index.html"
        if self.assets is None:  # routed here only when the run serves the page
            self._json({"error": "this run serves no dashboard"}, 404)
            return
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
            self._json(
                {"error": "no such endpoint; control actions are POST /control/start, /control/stop, /control/link"},
                404,
            )
            return
        if not self.control.authorized(self.headers.get("Authorization")):
            self._json(
                {
                    "error": "control needs Authorization: Bearer <token>; `collapsar run` "
                    "prints the token and writes it to RUNDIR/control-token"
                },
                401,
                {"WWW-Authenticate": 'Bearer realm="collapsar"'},
            )
            return
        try:
            body = self._body()
            self._json(
                self.control.handle(route[len("/control/") :], body, authorization=self.headers.get("Authorization"))
            )
        except ControlRefused as refused:
            self._json({"error": str(refused)}, refused.status)

    def _body(self) -> object:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ControlRefused(400, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise ControlRefused(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            raw = self.rfile.read(length) if length > 0 else b""
        except TimeoutError:  # its deadline: httpguard.Limits.request_s
            self.close_connection = True
            raise ControlRefused(408, f"request body not received in time ({length} bytes announced)") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise ControlRefused(400, f"request body is not JSON: {error}") from None

    def _stream(self) -> None:
        """The head and the current snapshot from this thread; every later
        snapshot from the streams' one thread (status/streams.py)."""
        slots = self.streams.slots
        if not slots.take():
            self.server.counters.add("streams_full")
            self._json(
                {"error": f"every one of this API's {slots.cap} streams is taken; poll /status, or try again later"},
                503,
                {"Retry-After": "5"},
            )
            return
        handed = False
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            encoded = self.board.encoded()
            self.wfile.write(encoded.frame)
            self.server.detach(self.connection)
            self.streams.add(self.connection, encoded.version)  # with the slot
            handed = True
        finally:
            if not handed:
                slots.give()


class StatusServer:
    def __init__(
        self,
        board: StatusBoard,
        port: int = 0,
        bind: str = "127.0.0.1",
        control: ControlHandler | None = None,
        topology: Callable[[], dict] | None = None,
        assets: Path | None = None,
        limits: Limits | None = None,
        error_log: Path | None = None,
    ):
        """`error_log`: where tracebacks of failed requests go (None: stderr)."""
        handler: type[_Handler] = type(
            "Handler",
            (_Handler,),
            {
                "board": board,
                "control": control,
                "topology": staticmethod(topology) if topology else None,
                "assets": assets,
                "loopback_only": binds_loopback(bind),
                "bind_name": bind.lower(),
            },
        )
        self._server = GuardedHTTPServer((bind, port), handler, limits, error_log)
        self._streams = handler.streams = Streams(
            board, self._server.limits, self._server.counters, self._server.errors
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve, name="status", daemon=True)

    def start(self) -> StatusServer:
        self._streams.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        if self._thread.ident is not None:
            self._thread.join()
        self._streams.stop()
        self._server.server_close()
