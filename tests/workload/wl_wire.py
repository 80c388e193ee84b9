"""An independent Python encoder of the workload wire format (README.md,
"Wire format"), used to send hand-made good and bad requests to wl-node and
to seed the fuzzer.  Written from the spec, not from the C code, so that a
disagreement between the two shows up as a failing test."""

import socket
import struct

MAGIC = 0x434C5352
VERSION = 1
REQUEST, REPLY = 1, 2
HDR = struct.Struct(">IBBHIQ16s8s")  # magic, version, type, flags, len, id, trace, parent span
COMPUTE, LOAD, STORE, FORWARD, SKIP = 1, 2, 3, 4, 5
OK, TIMEOUT, ERR = 0, 1, 2


def op_compute(ns, flags=0):
    return struct.pack(">BBHQ", COMPUTE, flags, 8, ns)


def op_io(kind, offset, nbytes, flags=0):
    return struct.pack(">BBHQI", kind, flags, 12, offset, nbytes)


def chain(*ops):
    return struct.pack(">H", len(ops)) + b"".join(ops)


TCP, UDP = 1, 2


def op_forward(targets, nack, timeout_us=1_000_000, retries=0, pad=0, reply_len=0, proto=TCP):
    """targets: list of (port, sub_chain_bytes) on 127.0.0.1; every target gets
    pad bytes of request padding and asks for a reply_len reply."""
    body = struct.pack(">IBBBB", timeout_us, retries, nack, len(targets), 0)
    for port, sub in targets:
        addr = socket.inet_aton("127.0.0.1") + bytes(12)
        body += struct.pack(">BBH16sIII", proto, 4, port, addr, pad, reply_len, len(sub)) + sub
    return struct.pack(">BBH", FORWARD, 0, len(body)) + body


def request(chain_bytes, req_id=1, reply_len=0, pad=0, msg_type=REQUEST, version=VERSION, magic=MAGIC, length=None):
    body = struct.pack(">I", reply_len) + chain_bytes + bytes(pad)
    total = HDR.size + len(body) if length is None else length
    return HDR.pack(magic, version, msg_type, 0, total, req_id, bytes(16), bytes(8)) + body


def read_reply(sock):
    """Return (id, status, total_length) of one reply, or None at EOF."""
    head = _read_exact(sock, HDR.size + 4)
    if head is None:
        return None
    magic, version, msg_type, _flags, total, req_id, _t, _p = HDR.unpack(head[: HDR.size])
    assert (magic, version, msg_type) == (MAGIC, VERSION, REPLY), head
    status = head[HDR.size]
    rest = total - len(head)
    while rest > 0:
        chunk = sock.recv(min(rest, 1 << 20))
        assert chunk, "connection closed inside a reply"
        rest -= len(chunk)
    return req_id, status, total


def _read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
