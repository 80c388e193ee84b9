"""Addresses of instances on other nodes, from the overlay's own DNS.

One node's Docker API only reports that node's containers.  Swarm's embedded
DNS (127.0.0.11 inside any container on the overlay) knows every task of the
network: `tasks.STACK_SERVICE` lists their addresses, and the reverse lookup
of an address names its task, `STACK_SERVICE.SLOT.TASKID[.NETWORK]`: the
slot is the replica number, so the instance.  The manager runs on the host
network, so it asks from inside the bootstrapper's namespace (a container of
the same stack on the same node, on the overlay by design).  No broadcast,
no node count: the DNS has the whole cluster's view.

The DNS client is the smallest that does A and PTR over UDP: one question,
answers read with name compression.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import struct
import threading

from ...model import instance_name

RESOLVER = ("127.0.0.11", 53)
TYPE_A, TYPE_PTR, CLASS_IN = 1, 12, 1


def encode_query(name: str, qtype: int, query_id: int) -> bytes:
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)  # recursion desired, one question
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.rstrip(".").split("."))
    return header + labels + b"\0" + struct.pack("!HH", qtype, CLASS_IN)


def _read_name(data: bytes, offset: int) -> tuple[str, int]:
    """A possibly compressed name at `offset`; returns it and the offset after it."""
    parts, end, jumps = [], None, 0
    while True:
        length = data[offset]
        if length & 0xC0 == 0xC0:  # a pointer to an earlier name
            if end is None:
                end = offset + 2
            offset = ((length & 0x3F) << 8) | data[offset + 1]
            jumps += 1
            if jumps > 32:
                raise ValueError("DNS name compression loop")
            continue
        if length == 0:
            return ".".join(parts), (end if end is not None else offset + 1)
        parts.append(data[offset + 1:offset + 1 + length].decode(errors="replace"))
        offset += 1 + length


def decode_answers(data: bytes, query_id: int) -> list[tuple[int, object]]:
    """(type, value) of each answer: an IPv4 string for A, a name for PTR."""
    ident, flags, qdcount, ancount, _, _ = struct.unpack("!HHHHHH", data[:12])
    if ident != query_id or flags & 0x000F not in (0, 3):  # 3: NXDOMAIN, no answers
        raise ValueError(f"DNS reply id {ident} flags {flags:#x}")
    offset = 12
    for _ in range(qdcount):
        _, offset = _read_name(data, offset)
        offset += 4
    answers = []
    for _ in range(ancount):
        _, offset = _read_name(data, offset)
        rtype, _, _, length = struct.unpack("!HHIH", data[offset:offset + 10])
        offset += 10
        if rtype == TYPE_A and length == 4:
            answers.append((rtype, socket.inet_ntoa(data[offset:offset + 4])))
        elif rtype == TYPE_PTR:
            answers.append((rtype, _read_name(data, offset)[0]))
        offset += length
    return answers


def reverse_name(ip: str) -> str:
    return ipaddress.IPv4Address(ip).reverse_pointer


def slot_of(task_name: str, service: str) -> int | None:
    """`st_web.3.abc.st_net` -> 3, for service `st_web`."""
    if not task_name.startswith(service + "."):
        return None
    slot = task_name[len(service) + 1:].split(".", 1)[0]
    return int(slot) if slot.isdigit() else None


class DnsAddresses:
    """instance -> address for a stack's services, asked from inside the
    namespace of `pid` (the bootstrapper's)."""

    def __init__(self, pid: int, stack: str, services: list[str], timeout_s: float = 1.0):
        self.pid, self.stack, self.services, self.timeout_s = pid, stack, services, timeout_s
        self._names: dict[str, str] = {}  # ip -> task name: a task keeps its address

    def _ask(self, sock: socket.socket, name: str, qtype: int) -> list[tuple[int, object]]:
        query_id = secrets.randbelow(1 << 16)
        sock.sendto(encode_query(name, qtype, query_id), RESOLVER)
        return decode_answers(sock.recv(4096), query_id)

    def _lookup(self) -> dict[str, str]:
        found: dict[str, str] = {}
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(self.timeout_s)
            for service in self.services:
                full = f"{self.stack}_{service}"
                for _, ip in self._ask(sock, f"tasks.{full}", TYPE_A):
                    if ip not in self._names:
                        names = [v for t, v in self._ask(sock, reverse_name(ip), TYPE_PTR) if t == TYPE_PTR]
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
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(self.timeout_s)
                return sorted(ip for _, ip in self._ask(sock, f"tasks.{self.stack}_{service}", TYPE_A))
        return self._in_namespace(ask)

    def _in_namespace(self, ask):
        """Run `ask` with its sockets made inside the bootstrapper's namespace,
        on a thread of its own (setns changes only the calling thread)."""
        from ..nsexec import CLONE_NEWNET, _libc
        result: list = []
        failure: list[BaseException] = []

        def body() -> None:
            try:
                fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(f"setns into the namespace of pid {self.pid}")
                finally:
                    os.close(fd)
                result.append(ask())
            except BaseException as error:  # re-raised on the caller's thread
                failure.append(error)

        thread = threading.Thread(target=body, name="overlay-dns")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]
