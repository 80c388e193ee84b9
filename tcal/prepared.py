"""A timeline step prepared ahead of its time and put in force at one instant.

Applying a step from Python at its deadline costs more than the kernel's
work: building the requests takes the step's thread hundreds of microseconds,
and each system call gives up the interpreter lock, which another thread of
the manager may then hold for a switch interval (0.5 ms) or, preempted on a
busy host, for a whole time slice.  Measured on this 2-core VM, the first
event of tests/kernel/test_local_run.py (14 path changes in 7 namespaces)
took 1.3-5.4 ms to apply on a quiet host and 7.1 ms once in CI, against a
budget of 5 ms.

So a step is prepared first: while a `PreparedStep` is open on a thread,
`RouteSocket.submit` queues the step's netlink requests instead of sending
them (the TCAL's trees take their new state at once, and undo it if the
kernel refuses), and the caller queues process-group signals and the
bookkeeping that follows the new state.  `fire` then makes one call into
libcxfire.so (tcal/fire/fire.c): it sleeps until the deadline, signals,
sends each namespace's requests as one batch and reads the answers, with
the interpreter lock released throughout.  Only after that do the TCAL's
completions and the caller's bookkeeping run.  bench/events_bench.py has
the figures (lateness p99 0.18-0.23 ms, where applying from Python had
2.1-4.1 ms).
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from collapsar.errors import EnvironmentProblem
from collapsar.tcal.built import TCAL_DIR, load_built
from collapsar.tcal.nlmsg import Request
from collapsar.tcal.nlsock import (
    REPLY_TIMEOUT_S,
    KernelFailure,
    RouteSocket,
    StepQueue,
    answered,
    batches,
    prepared_step,
    set_prepared_step,
)

LIBRARY_PATH = TCAL_DIR / "build" / "libcxfire.so"
_SOURCES = ("fire/fire.c", "fire/fire.h", "Makefile")
REPLY_BYTES_PER_REQUEST = 512  # an error answer: nlmsgerr + the refused header + the kernel's text
REPLY_BYTES_MIN = 4096  # the ACK and room to spare (fire.c copies each datagram in whole)


class _Signal(ctypes.Structure):
    _fields_ = [("pgid", ctypes.c_int32), ("sig", ctypes.c_int32), ("error", ctypes.c_int32)]


class _Batch(ctypes.Structure):
    _fields_ = [
        ("fd", ctypes.c_int32),
        ("last_seq", ctypes.c_uint32),
        ("request", ctypes.c_char_p),
        ("request_len", ctypes.c_uint64),
        ("reply", ctypes.c_void_p),
        ("reply_cap", ctypes.c_uint64),
        ("reply_len", ctypes.c_uint64),
        ("error", ctypes.c_int32),
    ]


_lib: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL:
    """Load libcxfire.so once."""
    global _lib
    if _lib is not None:
        return _lib
    lib = load_built(LIBRARY_PATH, _SOURCES, "the step firer (libcxfire)")
    lib.cx_fire.restype = None
    lib.cx_fire.argtypes = [
        ctypes.c_int64,
        ctypes.POINTER(_Signal),
        ctypes.c_uint64,
        ctypes.POINTER(_Batch),
        ctypes.c_uint64,
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int64),
    ]
    _lib = lib
    return lib


def preload() -> None:
    """Load the library now, so the first step does not pay for it close to
    its deadline.  A missing build is reported by the first step that needs
    it (a step with nothing for the kernel does not)."""
    try:
        _library()
    except EnvironmentProblem:
        pass


class _Queued:
    """One socket's share of the step: its requests in order, and for each
    submit the completion to call with that submit's refusals."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.completions: list[tuple[int, int, Callable[[list[KernelFailure]], None]]] = []


@dataclass
class _SealedBatch:
    """One batch of one socket's requests, encoded, with its answer buffer."""

    sock: RouteSocket
    queued: _Queued
    start: int
    end: int
    by_seq: dict
    last: int
    data: bytes
    reply: ctypes.Array


@dataclass
class _Sealed:
    """A step's queued work in the form the native call takes."""

    lib: ctypes.CDLL | None = None
    problem: EnvironmentProblem | None = None  # the library could not be loaded
    batches: list[_SealedBatch] = field(default_factory=list)
    native: ctypes.Array | None = None
    signals: ctypes.Array | None = None


class PreparedStep:
    """Use as a context manager around the step's preparation, then `fire`.

    deadline_ns: the step's instant on the monotonic clock (time.monotonic_ns)."""

    def __init__(self, deadline_ns: int):
        self.deadline_ns = deadline_ns
        self._sockets: dict[RouteSocket, _Queued] = {}
        self._signals: list[tuple[int, int]] = []
        self._records: list[Callable[[], None]] = []
        self._outer: StepQueue | None = None
        self._sealed: _Sealed | None = None

    def __enter__(self) -> PreparedStep:
        self._outer = prepared_step()
        set_prepared_step(self)
        return self

    def __exit__(self, *exc) -> None:
        set_prepared_step(self._outer)

    @staticmethod
    def current() -> PreparedStep | None:
        """The step being prepared on this thread, if any."""
        step = prepared_step()
        return step if isinstance(step, PreparedStep) else None

    # --- what a step does at its instant -------------------------------------

    def queue(self, sock: RouteSocket, requests: list[Request], then: Callable[[list[KernelFailure]], None]) -> None:
        """Netlink requests (RouteSocket.submit puts them here)."""
        self._refuse_if_sealed()
        queued = self._sockets.setdefault(sock, _Queued())
        first = len(queued.requests)
        queued.requests.extend(requests)
        queued.completions.append((first, len(queued.requests), then))

    def signal(self, pgid: int, sig: int) -> None:
        """Signal a process group (a vanished group is no error)."""
        self._refuse_if_sealed()
        self._signals.append((pgid, sig))

    def record(self, note: Callable[[], None]) -> None:
        """Bookkeeping of the new state (status, meters): run after the step is
        in force, not counted in its time."""
        self._records.append(note)

    def _refuse_if_sealed(self) -> None:
        if self._sealed is not None:
            raise RuntimeError("this step is sealed: what it does at its instant is already encoded")

    @property
    def has_instant_work(self) -> bool:
        return bool(self._sockets or self._signals)

    # --- firing ----------------------------------------------------------------

    def fire(self) -> tuple[int, int, list[Exception]]:
        """Wait for the deadline and do everything queued.  Returns
        (started_ns, applied_ns, errors): when the deadline was reached, when
        the step was in force, and what failed.  Every completion and record
        runs even when something before it failed."""
        started, applied, errors = self._fire_instant()
        for note in self._records:
            try:
                note()
            except Exception as exc:
                errors.append(exc)
        return started, applied, errors

    def seal(self) -> _Sealed:
        """Encode what was queued now, before the deadline, so that firing is
        the one native call: on an emulated or starved CPU the encoding took
        longer than the time left (33 ms late in the VM tier).  fire() seals
        a step not sealed yet; nothing can be queued after."""
        if self._sealed is None:
            self._sealed = self._encode()
        return self._sealed

    def _encode(self) -> _Sealed:
        sealed = _Sealed()
        if not self.has_instant_work:
            return sealed
        try:
            sealed.lib = _library()
        except EnvironmentProblem as exc:  # nothing will be sent
            sealed.problem = exc
            return sealed
        # Each socket's requests in as few batches as nlsock allows (the
        # kernel answers them in order); every buffer stays alive in `sealed`.
        for sock, queued in self._sockets.items():
            for start, end in batches(queued.requests):
                data, by_seq, last = sock.encode(queued.requests[start:end], start)
                reply = ctypes.create_string_buffer(max(REPLY_BYTES_MIN, REPLY_BYTES_PER_REQUEST * (end - start)))
                sealed.batches.append(_SealedBatch(sock, queued, start, end, by_seq, last, data, reply))
        sealed.native = (_Batch * len(sealed.batches))(
            *[
                _Batch(
                    b.sock.sock.fileno(),
                    b.last,
                    b.data,
                    len(b.data),
                    ctypes.cast(b.reply, ctypes.c_void_p),
                    len(b.reply),
                    0,
                    0,
                )
                for b in sealed.batches
            ]
        )
        sealed.signals = (_Signal * max(1, len(self._signals)))(*[_Signal(pgid, sig, 0) for pgid, sig in self._signals])
        return sealed

    def _fire_instant(self) -> tuple[int, int, list[Exception]]:
        sealed = self.seal()
        if not self.has_instant_work:
            _sleep_until(self.deadline_ns)
            now = time.monotonic_ns()
            return now, now, []
        if sealed.problem is not None:  # nothing is sent: every tree takes its old state back
            errors: list[Exception] = [sealed.problem]
            for queued in self._sockets.values():
                errors += _complete(queued, _all_failed(queued.requests, 0, len(queued.requests), errno.ENOPKG))
            return time.monotonic_ns(), time.monotonic_ns(), errors
        # Set by _encode whenever the library loaded (no problem) and there is work.
        assert sealed.lib is not None and sealed.native is not None and sealed.signals is not None
        times = (ctypes.c_int64 * 3)()  # woken, in force (last send), answers read
        sealed.lib.cx_fire(
            self.deadline_ns,
            sealed.signals,
            len(self._signals),
            sealed.native,
            len(sealed.batches),
            int(REPLY_TIMEOUT_S * 1000),
            times,
        )
        errors = []
        for i, (pgid, sig) in enumerate(self._signals):
            if sealed.signals[i].error not in (0, errno.ESRCH):
                errors.append(
                    OSError(
                        sealed.signals[i].error,
                        f"signal {sig} to process group {pgid}: {os.strerror(sealed.signals[i].error)}",
                    )
                )
        failures: dict[_Queued, list[KernelFailure]] = {queued: [] for queued in self._sockets.values()}
        for native, b in zip(sealed.native, sealed.batches):
            mine = failures[b.queued]
            if native.error:  # not sent, or no answer: count every request of it as refused
                mine += _all_failed(b.queued.requests, b.start, b.end, native.error)
            else:
                answered(b.reply.raw[: native.reply_len], b.by_seq, b.last, mine)
        for queued, refused in failures.items():
            errors += _complete(queued, refused)
        return times[0], times[1], errors


def _all_failed(requests: list[Request], start: int, end: int, error: int) -> list[KernelFailure]:
    return [KernelFailure(requests[i], error, "", index=i) for i in range(start, end)]


def _complete(queued: _Queued, failures: list[KernelFailure]) -> list[Exception]:
    """Hand each submit its own refusals (by their place in the batch)."""
    errors = []
    for first, end, then in queued.completions:
        try:
            then([f for f in failures if first <= f.index < end])
        except Exception as exc:
            errors.append(exc)
    return errors


def _sleep_until(deadline_ns: int) -> None:
    """A step with nothing for the kernel: wait in Python (coarse, then fine)."""
    while True:
        remaining = deadline_ns - time.monotonic_ns()
        if remaining <= 0:
            return
        time.sleep(remaining / 1e9 if remaining > 2_000_000 else min(remaining, 200_000) / 1e9)
