"""Every server-sent-event client of the status API, served by one thread.

A /stream request's own thread sends the response head and the current
snapshot, then hands its socket over here and ends.  This thread wakes once
per published snapshot and sends the same encoded bytes to every stream
with non-blocking sends.  A thread per stream would wake fifty threads a
period to contend for the interpreter lock, which the timeline's thread
needs to prepare its steps.  Measured with bench/status_bench.py on this
2-core VM (50 streams, 200 idle connections): a real-time Python thread's
wake-up p99 was 1.1-2.1 ms, once 180 ms, with a thread per stream and per
connection; 0.12-0.20 ms this way, against 0.09-0.13 ms with no clients.

A client that reads slowly is sent the latest snapshot once it has taken
the previous one whole (never half of one and then another); one that has
not taken a message within `write_s` is dropped.

When the board closes, its last snapshot (a run's "ended") goes to every
stream that has not had it, for at most FLUSH_S, and then the streams close:
a page learns that the run ended, and the run's exit waits no longer than that.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import cast

from collapsar.manager.status.board import StatusBoard
from collapsar.manager.status.guard import Counters, ErrorLog, Limits, Slots

POLL_S = 0.25  # how soon a stop, a slow client's progress or a deadline is seen
KEEP_ALIVE_S = 15.0  # a comment line after this long without a message keeps proxies from timing out
KEEP_ALIVE = b": keep-alive\n\n"
FLUSH_S = 0.5  # the board's last snapshot gets this long to reach every stream
FLUSH_POLL_S = 0.01


@dataclass
class _Stream:
    version: int  # of the last snapshot sent (or being sent)
    last_sent: float
    pending: memoryview | None = None  # the unsent rest of a message
    pending_since: float = 0.0


class Streams:
    def __init__(self, board: StatusBoard, limits: Limits, counters: Counters, errors: ErrorLog):
        self._board, self._limits, self._counters, self._errors = board, limits, counters, errors
        self.slots = Slots(limits.max_streams)  # taken by the request, given back here
        self._cond = threading.Condition()
        self._joining: list[tuple[socket.socket, int]] = []
        self._stopping = False
        self._done = False  # the thread has ended: a stream handed over now is closed at once
        self._streams: dict[socket.socket, _Stream] = {}
        self._selector = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._run, name="status-streams", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.ident is not None:
            self._thread.join()

    def add(self, sock: socket.socket, version: int) -> None:
        """A stream whose head and snapshot `version` are sent: served from now on."""
        with self._cond:
            if not self._done:
                self._joining.append((sock, version))
                self._cond.notify_all()
                return
        sock.close()  # the streams have ended: its own request sent it the latest snapshot
        self.slots.give()

    def _run(self) -> None:
        seen = -1
        try:
            while self._take_joining():
                self._board.wait_newer(seen, POLL_S)  # wakes on each snapshot published
                try:
                    if self._board.closed:
                        self._flush()
                        return
                    for key, events in self._selector.select(0):
                        self._ready(cast(socket.socket, key.fileobj), events)  # only sockets are registered
                    seen = self._send_all(time.monotonic())
                except Exception:  # a bug: reported, and the streams go on (unless the board closed)
                    self._errors.report("the status API's streams failed", traceback.format_exc())
                    if self._board.closed:
                        return
        finally:
            for sock in list(self._streams):
                self._drop(sock)
            with self._cond:
                self._done = True
                joining, self._joining = self._joining, []
            for sock, _ in joining:
                sock.close()
                self.slots.give()
            self._selector.close()

    def _take_joining(self) -> bool:
        """New streams in; while there are none, sleep. False: stop."""
        with self._cond:
            while not (self._joining or self._streams or self._stopping):
                self._cond.wait()
            joining, self._joining = self._joining, []
            if self._stopping:
                self._joining = joining  # closed in _run's finally
                return False
        self._admit(joining)
        return True

    def _admit(self, joining: list[tuple[socket.socket, int]]) -> None:
        now = time.monotonic()
        for sock, version in joining:
            sock.setblocking(False)
            self._streams[sock] = _Stream(version, now)
            self._selector.register(sock, selectors.EVENT_READ)  # readable: the client left

    def _flush(self) -> None:
        """The board's last snapshot to every stream that has not had it
        whole, streams that just joined included, until FLUSH_S has passed."""
        with self._cond:
            joining, self._joining = self._joining, []
        self._admit(joining)
        deadline = time.monotonic() + FLUSH_S
        while True:
            now = time.monotonic()
            last = self._send_all(now)
            if now >= deadline or all(s.pending is None and s.version >= last for s in self._streams.values()):
                return
            time.sleep(FLUSH_POLL_S)

    def _ready(self, sock: socket.socket, events: int) -> None:
        if events & selectors.EVENT_READ:
            try:
                if sock.recv(4096):
                    return  # a client has nothing to say on a stream: ignored
            except BlockingIOError:
                return
            except OSError:
                pass
            self._drop(sock)

    def _send_all(self, now: float) -> int:
        """Each stream its next message; returns the snapshot version sent."""
        encoded = self._board.encoded()
        for sock, stream in list(self._streams.items()):
            if stream.pending is not None:
                if now - stream.pending_since > self._limits.write_s:
                    self._counters.add("write")
                    self._drop(sock)
                    continue
                self._send(sock, stream, stream.pending, now)
            elif stream.version < encoded.version:
                stream.version = encoded.version
                self._send(sock, stream, memoryview(encoded.frame), now)
            elif now - stream.last_sent > KEEP_ALIVE_S:
                self._send(sock, stream, memoryview(KEEP_ALIVE), now)
        return encoded.version

    def _send(self, sock: socket.socket, stream: _Stream, data: memoryview, now: float) -> None:
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:  # the client left
            self._drop(sock)
            return
        stream.last_sent = now
        if sent == len(data):
            stream.pending = None
            return
        if stream.pending is None:
            stream.pending_since = now  # the clock runs from the message's first try
        stream.pending = data[sent:]

    def _drop(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        del self._streams[sock]
        sock.close()
        self.slots.give()
