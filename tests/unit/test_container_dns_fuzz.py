"""Fuzzing the overlay-DNS reply parser (hypothesis): whatever arrives (any
bytes, any body after the right header and question, answers built of DNS
pieces, mutated valid replies, names read at any offset), only a DnsError
leaves the parser, and what it returns is ASCII and short enough."""

import struct

from container_dns_support import QUERY, RR_A, RR_PTR, a_record, reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collapsar.manager.container.dnsaddr import reverse_name
from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, DnsError, decode_answers, encode_query, read_name

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PTR_QUERY = encode_query(reverse_name("10.201.0.5"), TYPE_PTR, 0x0101)
PTR_TARGET = b"\x0bst_web.2.ab\xc0\x0c"
VALID = [
    reply(QUERY, [a_record([10, 201, 0, 5]), a_record([10, 201, 0, 9], owner=b"\x05tasks\xc0\x12")]),
    reply(PTR_QUERY, [b"\xc0\x0c" + RR_PTR(len(PTR_TARGET)) + PTR_TARGET]),
]
PIECES = [
    b"\xc0\x0c",
    b"\xc0",
    b"\x00",
    b"\x01a",
    b"\x3f",
    b"\x40",
    b"\x80",
    b"\x05tasks",
    RR_A,
    RR_PTR(2),
    RR_PTR(300),
    b"\x01\x02\x03\x04",
    b"\xff",
    b"\xc3\xa9",
]


def only_dns_errors(data: bytes, query: bytes) -> None:
    try:
        answers = decode_answers(data, query)
    except DnsError as error:
        assert str(error) and "\n" not in str(error)
        return
    for rtype, value in answers:
        assert rtype in (TYPE_A, TYPE_PTR) and isinstance(value, str) and value.isascii()
        assert len(value) <= 253


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_any_bytes(data):
    only_dns_errors(data, QUERY)


@FUZZ
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.binary(max_size=300))
def test_fuzz_any_body_after_the_right_header_and_question(flags, ancount, body):
    header = QUERY[:2] + struct.pack("!HHHHH", flags | 0x8000, 1, ancount, 0, 0)
    only_dns_errors(header + QUERY[12:] + body, QUERY)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.sampled_from(PIECES),
            st.binary(max_size=4),
            st.integers(0xC000, 0xC0FF).map(lambda p: struct.pack("!H", p)),
        ),
        max_size=40,
    ),
    st.integers(1, 8),
)
def test_fuzz_answers_built_of_dns_pieces(pieces, ancount):
    header = QUERY[:2] + struct.pack("!HHHHH", 0x8180, 1, ancount, 0, 0)
    only_dns_errors(header + QUERY[12:] + b"".join(pieces), QUERY)


@FUZZ
@given(
    st.sampled_from(range(len(VALID))),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=6),
    st.integers(0, 200),
)
def test_fuzz_mutated_valid_replies(which, flips, cut):
    data = bytearray(VALID[which])
    for position, value in flips:
        if position < len(data):
            data[position] = value
    only_dns_errors(bytes(data[: len(data) - cut % (len(data) + 1)]), (QUERY, PTR_QUERY)[which])


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 310))
def test_fuzz_names_at_any_offset(data, offset):
    try:
        name, end = read_name(data, offset)
    except DnsError:
        return
    assert offset < end <= len(data) and name.isascii() and len(name) <= 253


def test_the_valid_fuzz_seeds_parse():
    assert decode_answers(VALID[0], QUERY) == [(TYPE_A, "10.201.0.5"), (TYPE_A, "10.201.0.9")]
    assert decode_answers(VALID[1], PTR_QUERY) == [(TYPE_PTR, "st_web.2.ab.5.0.201.10.in-addr.arpa")]
