"""A NETLINK_ROUTE socket inside one network namespace, sending requests in batches.

The socket is opened inside the instance's namespace (setns on this thread,
socket(), setns back): a socket stays in the namespace it was created in, so
every later request lands there without entering the namespace again.

Batching: many requests go in one sendmsg; the kernel handles them one after
the other in that call.  Only the last request of a batch asks for an ACK:
netlink always reports a failed request (with its sequence number), so one ACK
marks the end of the batch and each error maps back to its request.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from collapsar.errors import KernelError
from collapsar.tcal.nlmsg import NLM_F_ACK, NLM_F_REQUEST, Request, parse_attrs


class StepQueue(Protocol):
    """Where a step being prepared takes netlink requests (prepared.PreparedStep)."""

    def queue(
        self, sock: RouteSocket, requests: list[Request], then: Callable[[list[KernelFailure]], None]
    ) -> None: ...


CLONE_NEWNET = 0x40000000
SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
SIOCGIFMTU = 0x8921
_HDR = struct.Struct("=IHHII")
BUFFER_BYTES = 8 << 20
REPLY_TIMEOUT_S = 10.0
BATCH_BYTES = 1 << 20  # well under the send buffer
BATCH_REQUESTS = 2000  # keeps the worst case of error replies inside the receive buffer

_libc = ctypes.CDLL(None, use_errno=True)
_this_thread = threading.local()  # .step: the step being prepared on it (prepared.PreparedStep), if any


def prepared_step() -> StepQueue | None:
    return getattr(_this_thread, "step", None)


def set_prepared_step(step: StepQueue | None) -> None:
    _this_thread.step = step


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"cannot enter network namespace {what}: {os.strerror(err)}")


@contextmanager
def in_netns(netns: str | None) -> Iterator[None]:
    """Run the body with this thread in `netns` (None: stay where we are)."""
    if netns is None:
        yield
        return
    path = f"/run/netns/{netns}"
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KernelError(f"network namespace {netns!r} does not exist ({path} is missing)") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, repr(netns))
        try:
            yield
        finally:
            _setns(home, "of this process (going back)")
    finally:
        os.close(target)
        os.close(home)


class KernelFailure:
    """One request the kernel refused."""

    def __init__(self, request: Request, error: int, message: str, index: int = 0):
        self.request, self.errno, self.message = request, error, message
        self.index = index  # the request's place in its batch

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno, str(self.errno))
        detail = f": {self.message}" if self.message else ""
        return f"{self.request.what}: {os.strerror(self.errno)} ({name}){detail}"


class RouteSocket:
    def __init__(self, netns: str | None = None):
        self.netns = netns
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        for forced, plain in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, forced, BUFFER_BYTES)
            except PermissionError:
                self.sock.setsockopt(socket.SOL_SOCKET, plain, BUFFER_BYTES)
        # Errors carry only the failed header (not the whole request) plus the
        # kernel's own explanation ("Specified class not found").
        self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        # The kernel answers within the sendmsg call; a missing answer is a lost
        # ACK (receive buffer overrun), not something to wait on forever.
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def execute(self, requests: list[Request]) -> list[KernelFailure]:
        """Send every request, in order; return the ones the kernel refused."""
        failures: list[KernelFailure] = []
        for start, end in batches(requests):
            failures += self._send_batch(requests[start:end], start)
        return failures

    def submit(self, requests: list[Request], then: Callable[[list[KernelFailure]], None]) -> None:
        """Send now and call `then(failures)`; or, while a step is being
        prepared on this thread (collapsar.tcal.prepared), queue them to be
        sent at the step's instant, with `then` called after."""
        step = prepared_step()
        if step is not None:
            step.queue(self, requests, then)
        else:
            then(self.execute(requests))

    def encode(self, batch: list[Request], first_index: int = 0) -> tuple[bytes, dict[int, tuple[int, Request]], int]:
        """One sendable batch: (bytes, sequence -> (place among all the
        requests, counting from first_index; request), the sequence that
        asks for the ACK)."""
        parts, by_seq = [], {}
        for i, req in enumerate(batch):
            self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
            flags = NLM_F_REQUEST | req.flags | (NLM_F_ACK if i == len(batch) - 1 else 0)
            parts.append(_HDR.pack(_HDR.size + len(req.body), req.msg_type, flags, self.seq, 0))
            parts.append(req.body)
            by_seq[self.seq] = (first_index + i, req)
        return b"".join(parts), by_seq, self.seq

    def _send_batch(self, batch: list[Request], first_index: int) -> list[KernelFailure]:
        data, by_seq, last = self.encode(batch, first_index)
        self.sock.sendall(data)
        failures: list[KernelFailure] = []
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (OSError, TimeoutError) as exc:
                raise KernelError(
                    f"netlink: no answer to {batch[-1].what} (and {len(batch) - 1} requests before it): {exc}"
                ) from None
            if answered(data, by_seq, last, failures):
                return failures

    def ask(self, msg_type: int, body: bytes, what: str) -> bytes:
        """One request, one reply (a GET without DUMP): the reply's body."""
        for _, payload in self._replies(msg_type, NLM_F_REQUEST, body, what):
            return payload
        raise KernelError(f"netlink: {what}: the kernel answered nothing")

    def dump(self, msg_type: int, body: bytes, what: str) -> list[bytes]:
        """A GET with NLM_F_DUMP: every reply's body, until NLMSG_DONE.  (A
        qdisc GET without DUMP answers nothing on recent kernels.)"""
        bodies: list[bytes] = []
        for reply_type, payload in self._replies(msg_type, NLM_F_REQUEST | NLM_F_DUMP, body, what):
            if reply_type == NLMSG_DONE:
                return bodies
            bodies.append(payload)
        return bodies

    def _replies(self, msg_type: int, flags: int, body: bytes, what: str) -> Iterator[tuple[int, bytes]]:
        """Send one request; yield (type, body) of each answer to it until
        the caller stops; a refusal raises KernelError."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
        self.sock.sendall(_HDR.pack(_HDR.size + len(body), msg_type, flags, self.seq, 0) + body)
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError as exc:
                raise KernelError(f"netlink: no answer to {what}: {exc}") from None
            for reply_type, reply_flags, seq, payload in _messages(data):
                if seq != self.seq:
                    continue
                if reply_type == NLMSG_ERROR:
                    error = -struct.unpack_from("=i", payload)[0]
                    failure = KernelFailure(
                        Request(msg_type, 0, body, what), error, _ext_ack_message(reply_flags, payload)
                    )
                    raise KernelError(str(failure))
                yield reply_type, payload


def batches(requests: list[Request]) -> Iterator[tuple[int, int]]:
    """(start, end) of each batch the requests go in: at most BATCH_REQUESTS
    and BATCH_BYTES (a single larger request goes alone)."""
    start = 0
    while start < len(requests):
        end, size = start, 0
        while (
            end < len(requests)
            and end - start < BATCH_REQUESTS
            and (end == start or size + len(requests[end].body) + _HDR.size <= BATCH_BYTES)
        ):
            size += len(requests[end].body) + _HDR.size
            end += 1
        yield start, end
        start = end


def answered(data: bytes, by_seq: dict[int, tuple[int, Request]], last: int, failures: list[KernelFailure]) -> bool:
    """Note the refusals in `data` (answers of one batch); True once the
    batch's ACK (sequence `last`) is among them."""
    for msg_type, flags, seq, payload in _messages(data):
        if msg_type != NLMSG_ERROR or seq not in by_seq:
            continue
        error = -struct.unpack_from("=i", payload)[0]
        if error:
            index, request = by_seq[seq]
            failures.append(KernelFailure(request, error, _ext_ack_message(flags, payload), index=index))
        if seq == last:
            return True
    return False


def _messages(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    offset = 0
    while offset + _HDR.size <= len(data):
        length, msg_type, flags, seq, _ = _HDR.unpack_from(data, offset)
        if length < _HDR.size:
            return
        yield msg_type, flags, seq, data[offset + _HDR.size : offset + length]
        offset += (length + 3) & ~3


def _ext_ack_message(flags: int, payload: bytes) -> str:
    """The kernel's extack text after struct nlmsgerr (error + capped header)."""
    if not flags & NLM_F_ACK_TLVS:
        return ""
    text = parse_attrs(payload, 4 + _HDR.size).get(NLMSGERR_ATTR_MSG, b"")
    return text.rstrip(b"\0").decode(errors="replace")


def interface_index(netns: str | None, ifname: str) -> int:
    with in_netns(netns):
        try:
            return socket.if_nametoindex(ifname)
        except OSError:
            where = f" in network namespace {netns!r}" if netns else ""
            raise KernelError(f"interface {ifname!r} not found{where}") from None


def interface_mtu(netns: str | None, ifname: str) -> int:
    """SIOCGIFMTU on a socket made inside the namespace (not /sys, which shows
    the namespace that mounted it, not the one this thread is in)."""
    with in_netns(netns):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with probe:
        ifreq = struct.pack("16si", ifname.encode(), 0).ljust(40, b"\0")
        try:
            return struct.unpack_from("16si", fcntl.ioctl(probe.fileno(), SIOCGIFMTU, ifreq))[1]
        except OSError:
            where = f" in network namespace {netns!r}" if netns else ""
            raise KernelError(f"interface {ifname!r} not found{where}") from None
