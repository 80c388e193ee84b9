"""What the overlay-DNS tests share (test_container_dns_*.py): replies built
byte by byte to a query (`reply`, `a_record`), the A query they mostly answer
(QUERY, and END, where its first answer starts) and the fixed part of A and
PTR records."""

import struct

from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, encode_query


def reply(query: bytes, answers: list[bytes], flags: int = 0x8180, qdcount: int = 1) -> bytes:
    """A reply to `query` that echoes its question."""
    header = query[:2] + struct.pack("!HHHHH", flags, qdcount, len(answers), 0, 0)
    return header + query[12:] + b"".join(answers)


def a_record(ip: list[int], owner: bytes = b"\xc0\x0c") -> bytes:
    return owner + struct.pack("!HHIH", TYPE_A, 1, 600, 4) + bytes(ip)


QUERY = encode_query("tasks.st_web", TYPE_A, 0x0101)
END = len(QUERY)  # where the first answer starts
RR_A = struct.pack("!HHIH", TYPE_A, 1, 600, 4)
RR_PTR = lambda length: struct.pack("!HHIH", TYPE_PTR, 1, 600, length)  # noqa: E731
