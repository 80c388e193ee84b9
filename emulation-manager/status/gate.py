"""The status API's gate: the one thread that accepts connections, holds
each until its request begins, then gives it a thread or turns it away.

A connection that has sent nothing costs a file descriptor and a place in
a selector, not a thread: hundreds of idle clients cannot use up the
threads that /status needs.  Past `max_handlers` a request is answered 503
here, without a thread of its own (the rules are in status/guard.py).
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
import traceback

POLL_S = 0.05  # how soon a stop is seen (the stdlib server's loop polled as often)
ACCEPTS_PER_TURN = 64  # then the connections already waiting get their turn
_BODY = json.dumps({"error": "the status API is serving as many requests as it allows; try again shortly"}).encode()
BUSY_RESPONSE = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n" % len(_BODY)
) + _BODY
HEAD_MAX = 16 * 1024  # read of a turned-away request before it is answered anyway


class Gate:
    def __init__(self, server):
        """`server`: a httpguard.GuardedHTTPServer (its socket, limits, slots, counters)."""
        self.server = server
        self.limits = server.limits
        self._selector = selectors.DefaultSelector()
        # Both dicts are in deadline order: every entry of one kind gets the
        # same delay when it is (re-)inserted, so only the first can be due.
        self._waiting: dict[socket.socket, tuple[float, object]] = {}  # -> deadline, address
        # -> deadline, the request head read so far (None: answered, draining)
        self._turned: dict[socket.socket, tuple[float, bytearray | None]] = {}

    def run(self, stopping: threading.Event) -> None:
        listener = self.server.socket
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        try:
            while not stopping.is_set():
                for key, _ in self._selector.select(POLL_S):
                    try:
                        self._ready(key.fileobj, listener)
                    except Exception:  # a bug: that connection goes, the gate stays open
                        self.server.errors.report("the status API's gate failed", traceback.format_exc())
                        self._forget(key.fileobj, listener)
                self._expire(time.monotonic())
        finally:
            for sock in [*self._waiting, *self._turned]:
                sock.close()
            self._selector.close()

    def _ready(self, sock: socket.socket, listener: socket.socket) -> None:
        if sock is listener:
            self._accept(listener)
        elif sock in self._waiting:
            self._start(sock)
        elif sock in self._turned:
            self._read_turned(sock)

    def _forget(self, sock: socket.socket, listener: socket.socket) -> None:
        if sock is listener:
            return
        for table in (self._waiting, self._turned):
            table.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except KeyError:  # it failed before it was registered, or after
            pass
        sock.close()

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Out of file descriptors, say: the kernel's backlog keeps
                # the rest; waiting a little keeps this loop from spinning.
                time.sleep(POLL_S)
                return
            if len(self._waiting) >= self.limits.max_waiting:
                self.server.counters.add("waiting_full")  # counted first: the close is seen at once
                self._drop(next(iter(self._waiting)), self._waiting)  # the longest idle goes
            self._waiting[sock] = (time.monotonic() + self.limits.idle_s, address)
            self._selector.register(sock, selectors.EVENT_READ)

    def _drop(self, sock: socket.socket, table: dict) -> None:
        self._selector.unregister(sock)
        del table[sock]
        sock.close()

    def _start(self, sock: socket.socket) -> None:
        """The request has begun: a thread if one is free, else a 503."""
        self._selector.unregister(sock)
        _, address = self._waiting.pop(sock)
        if self.server.handler_slots.take():
            try:
                self.server.process_request(sock, address)  # a thread, which gives the slot back
                return
            except RuntimeError:  # the system would not start another thread
                self.server.handler_slots.give()
        self.server.counters.add("busy")
        sock.setblocking(False)
        self._turned[sock] = (time.monotonic() + self.limits.linger_s, bytearray())
        self._selector.register(sock, selectors.EVENT_READ)

    def _read_turned(self, sock: socket.socket) -> None:
        head = self._turned[sock][1]
        try:
            data = sock.recv(HEAD_MAX)
        except BlockingIOError:
            return
        except OSError:
            self._drop(sock, self._turned)
            return
        if head is None:  # answered: the rest of the request is read and dropped
            if not data:
                self._drop(sock, self._turned)
            return
        head += data
        if not data or b"\r\n\r\n" in head or len(head) >= HEAD_MAX:
            self._answer(sock)

    def _answer(self, sock: socket.socket) -> None:
        """The 503, then the connection lingers (status/guard.py says why)."""
        del self._turned[sock]
        try:
            sock.send(BUSY_RESPONSE)  # far smaller than a fresh socket's send buffer
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._selector.unregister(sock)
            sock.close()
            return
        self._turned[sock] = (time.monotonic() + self.limits.linger_s, None)

    def _expire(self, now: float) -> None:
        while self._waiting:
            sock, (deadline, _) = next(iter(self._waiting.items()))
            if deadline > now:
                break
            self.server.counters.add("idle")
            self._drop(sock, self._waiting)
        while self._turned:
            sock, (deadline, head) = next(iter(self._turned.items()))
            if deadline > now:
                break
            if head is None:
                self._drop(sock, self._turned)
            else:
                self._answer(sock)  # its head never came whole: answered all the same
