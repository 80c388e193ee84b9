"""Limits for the status API's HTTP server: what a slow, idle or crowded
client may cost the manager, and what happens past that.

`GuardedHTTPServer` is the stdlib's threaded server with these rules:

- One thread, the gate (status/gate.py), accepts connections and waits for
  each one's first byte: a connection that sends nothing holds a file
  descriptor, no thread, and is closed after `idle_s`.  Only when its
  request starts does it get a thread of its own.
- At most `max_handlers` such threads.  Past that a connection is answered
  503 by the gate itself, never left unaccepted: it reads the request head,
  answers, and lingers, reading, until the client closes (closing on unread
  input resets the connection, and a client still sending its request then
  gets an error instead of the 503: RFC 9112, 9.6).
- A request (line, headers and body) must arrive within `request_s` of its
  thread starting, however it trickles; a response (each stream message
  too) must be taken within `write_s`.  Either closes the connection.
- A handler that raises answers 500 with a JSON error, the traceback goes
  to the error log (never to the client), and the server goes on.

The server speaks HTTP/1.0 (the stdlib's default): a connection carries one
request, so there is no idle keep-alive to bound.  Every refusal and
timeout is counted for /metrics.
"""

from __future__ import annotations

import io
import json
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from collapsar.manager.status.gate import Gate


@dataclass(frozen=True)
class Limits:
    max_handlers: int = 128  # request threads (a stream needs one only to start: status/streams.py)
    max_streams: int = 64  # server-sent-event clients
    max_waiting: int = 1024  # accepted connections that have not sent a byte yet
    idle_s: float = 10.0  # before the first byte of a request
    request_s: float = 5.0  # from the first byte to the end of the body
    write_s: float = 10.0  # for a client to take one response or stream message
    linger_s: float = 1.0  # a turned-away client's time to send its head, then to read the 503


BACKLOG = 1024  # a burst of connects waits in the kernel, not for a SYN retry (1 s)


class Counters:
    """Refusals and timeouts since the server started (for /metrics)."""

    NAMES = ("busy", "streams_full", "waiting_full", "idle", "request", "write", "errors")

    def __init__(self):
        self._lock = threading.Lock()  # += on an attribute is not atomic across threads
        self.values = dict.fromkeys(self.NAMES, 0)

    def add(self, name: str) -> None:
        with self._lock:
            self.values[name] += 1

    def metrics(self, handlers: int, streams: int) -> str:
        v = self.values
        return (
            "\n".join(
                [
                    "# HELP collapsar_status_rejected_total Connections answered 503 or dropped: over a cap",
                    "# TYPE collapsar_status_rejected_total counter",
                    f'collapsar_status_rejected_total{{reason="connections"}} {v["busy"]}',
                    f'collapsar_status_rejected_total{{reason="streams"}} {v["streams_full"]}',
                    f'collapsar_status_rejected_total{{reason="waiting"}} {v["waiting_full"]}',
                    "# HELP collapsar_status_timeouts_total Connections closed for being too slow",
                    "# TYPE collapsar_status_timeouts_total counter",
                    *(
                        f'collapsar_status_timeouts_total{{phase="{phase}"}} {v[phase]}'
                        for phase in ("idle", "request", "write")
                    ),
                    "# HELP collapsar_status_errors_total Requests answered 500 (traceback in the log)",
                    "# TYPE collapsar_status_errors_total counter",
                    f"collapsar_status_errors_total {v['errors']}",
                    "# HELP collapsar_status_connections Requests served now (a stream only as it starts)",
                    "# TYPE collapsar_status_connections gauge",
                    f"collapsar_status_connections {handlers}",
                    "# HELP collapsar_status_streams Server-sent-event clients now",
                    "# TYPE collapsar_status_streams gauge",
                    f"collapsar_status_streams {streams}",
                ]
            )
            + "\n"
        )


class Slots:
    """A count of things in use under a cap (threads, streams)."""

    def __init__(self, cap: int):
        self.cap, self.in_use = cap, 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.in_use >= self.cap:
                return False
            self.in_use += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.in_use -= 1


class ErrorLog:
    """Tracebacks of failed requests: to `path` (the run directory) when
    given, the first one also named in one line on stderr; else to stderr."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._told = False

    def report(self, what: str, trace: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self._lock:
            if self.path is None:
                print(f"status API: {what}\n{trace}", file=sys.stderr, flush=True)
                return
            with open(self.path, "a") as log:
                log.write(f"{stamp} {what}\n{trace}\n")
            if not self._told:
                self._told = True
                print(f"warning: status API: {what}; tracebacks in {self.path}", file=sys.stderr, flush=True)


class _DeadlineReader(io.RawIOBase):
    """The request side of a connection: every read shares one deadline, so
    a request trickled a byte at a time still ends when its time is up."""

    def __init__(self, sock: socket.socket, handler: GuardedHandler):
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self._handler.read_deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("request not received in time")
            self._sock.settimeout(left)
            return self._sock.recv_into(buffer)
        except TimeoutError:
            self._handler.server.counters.add("request")
            raise


class _TimedWriter(io.BufferedIOBase):
    """The response side: each write must be taken within `write_s`."""

    def __init__(self, sock: socket.socket, server: GuardedHTTPServer):
        self._sock, self._server = sock, server

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._sock.settimeout(self._server.limits.write_s)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            self._server.counters.add("write")
            raise
        return len(data)


class GuardedHandler(BaseHTTPRequestHandler):
    """Base of the API's handler: deadlines on both sides, 500 on a failure."""

    server: GuardedHTTPServer
    read_deadline = 0.0

    def setup(self) -> None:
        # Replaces StreamRequestHandler.setup (its socket files would keep the
        # socket open after close): the same two files, with time limits.
        self.connection = self.request
        # Head and body go out as two writes: with Nagle's algorithm the body
        # could wait for the client's delayed acknowledgement of the head.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))
        self.wfile = _TimedWriter(self.connection, self.server)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._answered = True
        super().send_response(code, message)

    def handle_one_request(self) -> None:
        self.read_deadline = time.monotonic() + self.server.limits.request_s
        self._answered = False
        try:
            super().handle_one_request()  # closes the connection itself on a timeout
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left: nothing to answer, nothing to log
        except Exception:
            self.close_connection = True
            self.server.counters.add("errors")
            # Unset when the failure came before the request line was parsed:
            method, path = getattr(self, "command", None) or "request", getattr(self, "path", "")
            what = f"{method} {path[:200]} failed"
            self.server.errors.report(what, traceback.format_exc())
            if not self._answered:  # else the client sees a cut answer (Content-Length says so)
                self._internal_error()

    def _internal_error(self) -> None:
        body = json.dumps({"error": "internal error of the status API; the traceback is in the manager's log"}).encode()
        try:
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client left meanwhile


class GuardedHTTPServer(ThreadingHTTPServer):
    """Serve with `serve()` on a thread of its own, end with `stop()`."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[GuardedHandler],
        limits: Limits | None = None,
        error_log: Path | None = None,
    ):
        super().__init__(address, handler)
        self.limits = limits or Limits()
        self.counters = Counters()
        self.errors = ErrorLog(error_log)
        self.handler_slots = Slots(self.limits.max_handlers)
        self._stopping = threading.Event()
        self._detached: set[socket.socket] = set()

    def metrics(self, streams: int) -> str:
        return self.counters.metrics(self.handler_slots.in_use, streams)

    def detach(self, request: socket.socket) -> None:
        """The connection outlives its request's thread: someone else closes it."""
        self._detached.add(request)

    def shutdown_request(self, request) -> None:
        if request in self._detached:
            self._detached.discard(request)
            return
        super().shutdown_request(request)

    def serve(self) -> None:
        Gate(self).run(self._stopping)

    def stop(self) -> None:
        self._stopping.set()

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.handler_slots.give()

    def handle_error(self, request, client_address) -> None:
        # Only what escaped the handler's own net (its setup, say): the
        # stdlib would print it to stderr between the run's lines.
        self.counters.add("errors")
        self.errors.report(f"connection from {client_address[0]} failed", traceback.format_exc())
