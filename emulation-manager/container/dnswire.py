"""The DNS wire format, as much as the overlay-DNS client needs: one A or PTR
question out, the answers of its reply back.

A reply is untrusted input (anything on the overlay can send datagrams to
the manager's socket, and a resolver can be buggy), so every read is
bounded: the header, each label, each record and each name are checked
against the bytes actually received, compression pointers must point
strictly backwards (so no chain of them can loop), names stop at 255 bytes,
and labels must be ASCII.  Whatever is wrong becomes one `DnsError` naming
the byte where it went wrong; no other exception leaves `decode_answers`.
"""

from __future__ import annotations

import socket
import struct

from collapsar.errors import CollapsarError

TYPE_A, TYPE_PTR, CLASS_IN = 1, 12, 1
HEADER_BYTES = 12
MAX_NAME_BYTES = 255  # RFC 1035 3.1: a name's wire form, length octets included
RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
_FLAG_REPLY, _FLAG_OPCODE = 0x8000, 0x7800
_RECORD = struct.Struct("!HHIH")  # type, class, ttl, rdata length


class DnsError(CollapsarError):
    """The overlay's DNS did not answer, or answered something unreadable."""


def encode_query(name: str, qtype: int, query_id: int) -> bytes:
    """One question, recursion desired.  Names come from the experiment and
    the stack, so a label that does not fit the format is a caller's bug
    reported as a DnsError, not a malformed packet sent."""
    labels = name.rstrip(".").split(".")
    if any(not 0 < len(label) < 64 or not label.isascii() for label in labels):
        raise DnsError(f"cannot ask for {name!r}: every label must be 1-63 ASCII characters")
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)
    wire = b"".join(bytes([len(label)]) + label.encode("ascii") for label in labels) + b"\0"
    if len(wire) > MAX_NAME_BYTES:
        raise DnsError(f"cannot ask for {name[:60]!r}...: longer than {MAX_NAME_BYTES} bytes")
    return header + wire + struct.pack("!HH", qtype, CLASS_IN)


def reply_id(data: bytes) -> int | None:
    """The id of a datagram, None if it is too short to carry one."""
    return int.from_bytes(data[:2], "big") if len(data) >= 2 else None


def read_name(data: bytes, offset: int) -> tuple[str, int]:
    """The name at `offset` (possibly compressed); returns it and the offset
    just after it in place (after its first pointer, if any)."""
    labels: list[str] = []
    wire_bytes, after = 1, None  # the final zero octet counts towards the limit
    segment_start = offset  # where the run of labels being read began
    while True:
        if offset >= len(data):
            raise DnsError(f"name at byte {segment_start} runs past the end of the reply ({len(data)} bytes)")
        length = data[offset]
        if length & 0xC0 == 0xC0:
            if offset + 1 >= len(data):
                raise DnsError(f"compression pointer at byte {offset} is cut off by the end of the reply")
            target = ((length & 0x3F) << 8) | data[offset + 1]
            # Strictly before the labels read since the last jump: each jump
            # then lowers segment_start, so no set of pointers can loop.
            if not HEADER_BYTES <= target < segment_start:
                raise DnsError(
                    f"compression pointer at byte {offset} points to byte {target}, "
                    f"expected an earlier name (bytes {HEADER_BYTES}-{segment_start - 1})"
                )
            if after is None:
                after = offset + 2
            offset = segment_start = target
            continue
        if length & 0xC0:
            raise DnsError(
                f"label type {length & 0xC0:#x} at byte {offset}: expected a length or a compression pointer"
            )
        if length == 0:
            return ".".join(labels), (after if after is not None else offset + 1)
        wire_bytes += 1 + length
        if wire_bytes > MAX_NAME_BYTES:
            raise DnsError(f"name at byte {segment_start} is longer than {MAX_NAME_BYTES} bytes")
        label = data[offset + 1 : offset + 1 + length]
        if len(label) < length:
            raise DnsError(
                f"label at byte {offset} of {length} bytes runs past the end of the reply ({len(data)} bytes)"
            )
        if not label.isascii():
            raise DnsError(f"label at byte {offset} is not ASCII")
        labels.append(label.decode("ascii"))
        offset += 1 + length


def _check_header(data: bytes, query: bytes) -> tuple[int, int]:
    """(flags, answer count) of a reply that belongs to `query`."""
    if len(data) < HEADER_BYTES:
        raise DnsError(f"reply of {len(data)} bytes is shorter than a DNS header ({HEADER_BYTES})")
    ident, flags, qdcount, ancount = struct.unpack("!HHHH", data[:8])
    expected = reply_id(query)
    if ident != expected:
        raise DnsError(f"reply id {ident} does not match query id {expected}")
    if not flags & _FLAG_REPLY or flags & _FLAG_OPCODE:
        raise DnsError(f"flags {flags:#06x}: expected a standard query's reply")
    rcode = flags & 0x000F
    if rcode not in (0, 3):  # 3: NXDOMAIN, the name has no tasks (yet)
        raise DnsError(f"the server answered {RCODE_NAMES.get(rcode, f'rcode {rcode}')} (flags {flags:#06x})")
    name, kind = query[HEADER_BYTES:-4], query[-4:]
    echoed = data[HEADER_BYTES : len(query)]
    # Servers copy the question verbatim, though the name's case may differ (RFC 4343).
    if qdcount != 1 or echoed[:-4].lower() != name.lower() or echoed[-4:] != kind:
        raise DnsError(f"the question section ({qdcount} questions) does not echo the query")
    return flags, ancount


def decode_answers(data: bytes, query: bytes) -> list[tuple[int, object]]:
    """(type, value) of each answer of `data`, the reply to `query` (as
    encode_query made it): an IPv4 string for A, a name for PTR; answers of
    other types (a CNAME on the way) are skipped."""
    _, ancount = _check_header(data, query)
    offset = len(query)  # the question was checked to be the query's own
    answers: list[tuple[int, object]] = []
    for index in range(1, ancount + 1):
        where = f"answer {index} of {ancount}"
        try:
            _, offset = read_name(data, offset)
        except DnsError as error:
            raise DnsError(f"{where}: {error}") from None
        if offset + _RECORD.size > len(data):
            raise DnsError(f"{where}: record at byte {offset} is cut off by the end of the reply ({len(data)} bytes)")
        rtype, rclass, _, length = _RECORD.unpack_from(data, offset)
        offset += _RECORD.size
        if offset + length > len(data):
            raise DnsError(
                f"{where}: {length} bytes of data at byte {offset} run past the end of the reply ({len(data)} bytes)"
            )
        if rtype == TYPE_A and rclass == CLASS_IN:
            if length != 4:
                raise DnsError(f"{where}: an A record of {length} bytes, expected 4")
            answers.append((rtype, socket.inet_ntoa(data[offset : offset + 4])))
        elif rtype == TYPE_PTR and rclass == CLASS_IN:
            try:
                name, end = read_name(data, offset)
            except DnsError as error:
                raise DnsError(f"{where}: PTR {error}") from None
            if end != offset + length:
                raise DnsError(f"{where}: PTR data of {length} bytes holds a name of {end - offset}")
            answers.append((rtype, name))
        offset += length
    return answers
