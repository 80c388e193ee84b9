"""Addresses of instances on other nodes, from the overlay's own DNS.

One node's Docker API only reports that node's containers.  Swarm's embedded
DNS (127.0.0.11 inside any container on the overlay) knows every task of the
network: `tasks.STACK_SERVICE` lists their addresses, and the reverse lookup
of an address names its task, `STACK_SERVICE.SLOT.TASKID[.NETWORK]`: the
slot is the replica number, so the instance.  The manager runs on the host
network, so it asks from inside the bootstrapper's namespace (a container of
the same stack on the same node, on the overlay by design).  No broadcast,
no node count: the DNS has the whole cluster's view.

The client is the smallest that does A and PTR over UDP (the wire format is
dnswire.py).  Its socket is connected to the resolver, so the kernel drops
datagrams from any other address or port; a reply must also carry the
query's random id and echo its question.  Every failure, a silent resolver
or an unreadable reply, is a `DnsError`: the run reports it and asks again
at its next rescan (`OutageReport`).
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, DnsError, decode_answers, encode_query, reply_id
from collapsar.model import instance_name

RESOLVER = ("127.0.0.11", 53)
MAX_DATAGRAM = 65535  # read whole datagrams: a cut one would read as malformed
TYPE_NAMES = {TYPE_A: "A", TYPE_PTR: "PTR"}
T = TypeVar("T")


def reverse_name(ip: str) -> str:
    return ipaddress.IPv4Address(ip).reverse_pointer


def slot_of(task_name: str, service: str) -> int | None:
    """`st_web.3.abc.st_net` -> 3, for service `st_web`."""
    if not task_name.startswith(service + "."):
        return None
    slot = task_name[len(service) + 1 :].split(".", 1)[0]
    return int(slot) if slot.isascii() and slot.isdigit() else None


class Resolver:
    """A UDP socket connected to one DNS server, asking one question at a time."""

    def __init__(self, server: tuple[str, int] = RESOLVER, timeout_s: float = 1.0):
        self.server, self.timeout_s = server, timeout_s
        self.label = f"{server[0]}:{server[1]}"
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.connect(server)  # from now on the kernel drops datagrams from anyone else
        except OSError as error:
            self._sock.close()
            raise DnsError(f"DNS {self.label}: cannot connect: {error.strerror or error}") from None

    def __enter__(self) -> Resolver:
        return self

    def __exit__(self, *exc) -> None:
        self._sock.close()

    def ask(self, name: str, qtype: int) -> list[str]:
        """The answers of the type asked (addresses for A, names for PTR; a
        reply may carry others), or a DnsError naming the server and the question."""
        what = f"DNS {self.label}: {TYPE_NAMES.get(qtype, qtype)} {name}"
        query = encode_query(name, qtype, secrets.randbelow(1 << 16))
        try:
            self._sock.send(query)
            data = self._reply_to(query, time.monotonic() + self.timeout_s)
        except OSError as error:  # e.g. ICMP port unreachable: nothing listens there
            raise DnsError(f"{what}: {error.strerror or error}") from None
        if data is None:
            raise DnsError(f"{what}: no reply within {self.timeout_s:g} s")
        try:
            answers = decode_answers(data, query)
        except DnsError as error:
            raise DnsError(f"{what}: {error}") from None
        return [str(value) for rtype, value in answers if rtype == qtype]

    def _reply_to(self, query: bytes, deadline: float) -> bytes | None:
        """The first datagram carrying the query's id, None at the deadline."""
        while (left := deadline - time.monotonic()) > 0:
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except TimeoutError:
                return None
            # Another id: a late reply to an earlier question of this socket.
            if reply_id(data) == reply_id(query):
                return data
        return None


class DnsAddresses:
    """instance -> address for a stack's services, asked from inside the
    namespace of `pid` (the bootstrapper's; None: this process's own)."""

    def __init__(
        self,
        pid: int | None,
        stack: str,
        services: list[str],
        timeout_s: float = 1.0,
        server: tuple[str, int] = RESOLVER,
    ):
        self.pid, self.stack, self.services, self.timeout_s = pid, stack, services, timeout_s
        self.server = server
        self._names: dict[str, str] = {}  # ip -> task name: a task keeps its address

    def _lookup(self) -> dict[str, str]:
        found: dict[str, str] = {}
        with Resolver(self.server, self.timeout_s) as resolver:
            for service in self.services:
                full = f"{self.stack}_{service}"
                for ip in resolver.ask(f"tasks.{full}", TYPE_A):
                    if ip not in self._names:
                        names = resolver.ask(reverse_name(ip), TYPE_PTR)
                        if names:
                            self._names[ip] = names[0]
                    slot = slot_of(self._names.get(ip, ""), full)
                    if slot is not None:
                        found[instance_name(service, slot)] = ip
        return found

    def __call__(self) -> dict[str, str]:
        return self._in_namespace(self._lookup)

    def task_addresses(self, service: str) -> list[str]:
        """The addresses of every task of the stack's `service` (e.g. the
        bootstrapper: one per node)."""

        def ask() -> list[str]:
            with Resolver(self.server, self.timeout_s) as resolver:
                return sorted(resolver.ask(f"tasks.{self.stack}_{service}", TYPE_A))

        return self._in_namespace(ask)

    def _in_namespace(self, ask: Callable[[], T]) -> T:
        """Run `ask` with its sockets made inside the bootstrapper's namespace,
        on a thread of its own (setns changes only the calling thread)."""
        if self.pid is None:
            return ask()
        from collapsar.manager.nsexec import CLONE_NEWNET, setns

        result: list = []
        failure: list[BaseException] = []

        def body() -> None:
            try:
                try:
                    fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
                    try:
                        if setns(fd, CLONE_NEWNET) != 0:
                            code = ctypes.get_errno()
                            raise OSError(code, os.strerror(code))
                    finally:
                        os.close(fd)
                except OSError as error:  # the bootstrapper stopped: its namespace went with it
                    raise DnsError(
                        f"DNS: cannot enter the network namespace of pid {self.pid} "
                        f"(the bootstrapper): {error.strerror or error}"
                    ) from None
                result.append(ask())
            except BaseException as error:  # re-raised on the caller's thread
                failure.append(error)

        thread = threading.Thread(target=body, name="overlay-dns")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]


class OutageReport:
    """Calls something that may fail while Swarm tasks come and go, and says
    so once per outage: the first failure, then nothing until it works again
    (the run retries at every rescan, every 2 s: a line each time would bury
    everything else it says)."""

    def __init__(self, what: str, say: Callable[[str], None]):
        self.what, self.say = what, say
        self.failing = False

    def attempt(self, call: Callable[[], T], fallback: T) -> T:
        """`call()`, or `fallback` when it raises a DnsError."""
        try:
            value = call()
        except DnsError as error:
            if not self.failing:
                self.say(f"warning: {self.what}: {error} (retried at every rescan; said again once it works)")
            self.failing = True
            return fallback
        if self.failing:
            self.say(f"{self.what}: works again")
        self.failing = False
        return value
