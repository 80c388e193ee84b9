"""Probes of a running wl-node for the abuse tests: what it holds (RSS,
descriptors) and one-shot hand-encoded requests."""

import os
import socket

import wl_wire as wire

MIB = 1 << 20


def status_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def open_fds(node):
    return len(os.listdir(f"/proc/{node.proc.pid}/fd"))


def connect(node, rcvbuf=None):
    """A client socket; a small rcvbuf keeps the kernel from absorbing replies
    the test means the node to hold (loopback autotuning goes to 32 MiB)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", node.port))
    s.settimeout(10)
    return s


def ask(node, payload):
    """Send one request on a new connection and return (id, status, length) of its reply."""
    with connect(node) as s:
        s.sendall(payload)
        return wire.read_reply(s)


def forward_request(port, req_id=1, sub=None, timeout_us=1_000_000, **target):
    return wire.request(
        wire.chain(wire.op_forward([(port, sub or wire.chain())], nack=1, timeout_us=timeout_us, **target)),
        req_id=req_id,
    )
