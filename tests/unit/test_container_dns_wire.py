"""The overlay-DNS address source's wire format: the query it sends, A and
PTR answers (name compression, a question echoed in other case, NXDOMAIN),
every kind of malformed reply raising one DnsError that says what is wrong
and where, names DNS cannot carry, and how a task name becomes an instance
(reverse names and slots)."""

import struct

import pytest
from container_dns_support import END, QUERY, RR_A, RR_PTR, a_record, reply

from collapsar.manager.container.dnsaddr import reverse_name, slot_of
from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, DnsError, decode_answers, encode_query


def test_query_is_one_question_with_recursion_desired():
    assert encode_query("tasks.st_web", TYPE_A, 0x1234) == (
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05tasks\x06st_web\x00\x00\x01\x00\x01"
    )


def test_a_answers_with_a_compressed_owner_name():
    query = encode_query("tasks.st_web", TYPE_A, 7)
    data = reply(query, [a_record([10, 201, 0, 5]), a_record([10, 201, 0, 9])])
    assert decode_answers(data, query) == [(TYPE_A, "10.201.0.5"), (TYPE_A, "10.201.0.9")]


def test_ptr_answer_names_the_task():
    query = encode_query(reverse_name("10.201.0.5"), TYPE_PTR, 9)
    target = b"\x0bst_web.2.ab\x0ast_network\x00"  # labels as the server writes them
    data = reply(query, [b"\xc0\x0c" + struct.pack("!HHIH", TYPE_PTR, 1, 600, len(target)) + target])
    assert decode_answers(data, query) == [(TYPE_PTR, "st_web.2.ab.st_network")]


def test_a_question_echoed_in_other_case_and_nxdomain_are_fine():
    query = encode_query("tasks.st_web", TYPE_A, 3)
    upper = query[:12] + query[12:-4].upper() + query[-4:]
    assert decode_answers(reply(upper, [a_record([10, 0, 0, 1])]), query) == [(TYPE_A, "10.0.0.1")]
    assert decode_answers(reply(query, [], flags=0x8183), query) == []  # NXDOMAIN: no tasks yet


MALFORMED = [
    (b"", "reply of 0 bytes is shorter than a DNS header (12)"),
    (QUERY[:7], "reply of 7 bytes is shorter than a DNS header"),
    (b"\x02\x02" + reply(QUERY, [])[2:], "reply id 514 does not match query id 257"),
    (reply(QUERY, [], flags=0x0100), "flags 0x0100: expected a standard query's reply"),
    (reply(QUERY, [], flags=0x8182), "the server answered SERVFAIL (flags 0x8182)"),
    (reply(QUERY, [], flags=0x8185), "the server answered REFUSED"),
    (
        reply(encode_query("tasks.st_evil", TYPE_A, 0x0101), []),
        "the question section (1 questions) does not echo the query",
    ),
    (reply(encode_query("tasks.st_web", TYPE_PTR, 0x0101), []), "does not echo the query"),
    (reply(QUERY, [], qdcount=0), "the question section (0 questions) does not echo the query"),
    (reply(QUERY, [], qdcount=2), "the question section (2 questions) does not echo the query"),
    (
        QUERY[:2] + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x05tas",
        "the question section (1 questions) does not echo the query",
    ),
    # More answers counted than sent.
    (
        reply(QUERY, [a_record([1, 2, 3, 4])])[:6] + b"\x00\x05" + reply(QUERY, [a_record([1, 2, 3, 4])])[8:],
        f"answer 2 of 5: name at byte {END + 16} runs past the end of the reply ({END + 16} bytes)",
    ),
    (reply(QUERY, [b"\xc0\x0c" + RR_A[:6]]), f"answer 1 of 1: record at byte {END + 2} is cut off"),
    (
        reply(QUERY, [b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, 600, 900) + b"\x01\x02"]),
        f"answer 1 of 1: 900 bytes of data at byte {END + 12} run past the end of the reply",
    ),
    (
        reply(QUERY, [b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, 600, 5) + b"\x01\x02\x03\x04\x05"]),
        "answer 1 of 1: an A record of 5 bytes, expected 4",
    ),
    # Name compression: a pointer to itself, forwards, into the header, a label looping back.
    (
        reply(QUERY, [struct.pack("!H", 0xC000 | END) + RR_A + b"\x01\x02\x03\x04"]),
        f"answer 1 of 1: compression pointer at byte {END} points to byte {END}, expected an earlier "
        f"name (bytes 12-{END - 1})",
    ),
    (
        reply(QUERY, [struct.pack("!H", 0xC000 | (END + 2)) + b"\x00" + RR_A + b"\x01\x02\x03\x04"]),
        f"compression pointer at byte {END} points to byte {END + 2}, expected an earlier name",
    ),
    (
        reply(QUERY, [b"\xc0\x02" + RR_A + b"\x01\x02\x03\x04"]),
        f"compression pointer at byte {END} points to byte 2, expected an earlier name",
    ),
    (
        reply(QUERY, [b"\x01a" + struct.pack("!H", 0xC000 | END) + RR_A + b"\x01\x02\x03\x04"]),
        f"compression pointer at byte {END + 2} points to byte {END}, expected an earlier name",
    ),
    (reply(QUERY, [b"\xc0"]), f"compression pointer at byte {END} is cut off by the end of the reply"),
    (reply(QUERY, [b"\x41abc" + RR_A]), f"label type 0x40 at byte {END}: expected a length or a compression"),
    (reply(QUERY, [b"\x80abc" + RR_A]), f"label type 0x80 at byte {END}: expected a length"),
    (reply(QUERY, [b"\x3fabc"]), f"label at byte {END} of 63 bytes runs past the end of the reply"),
    (
        reply(QUERY, [(b"\x3f" + b"x" * 63) * 5 + b"\x00" + RR_A + b"\x01\x02\x03\x04"]),
        f"answer 1 of 1: name at byte {END} is longer than 255 bytes",
    ),
    (reply(QUERY, [b"\x02\xc3\xa9\x00" + RR_A + b"\x01\x02\x03\x04"]), f"label at byte {END} is not ASCII"),
    (reply(QUERY, [b"\xc0\x0c" + RR_PTR(3) + b"\x02ab\x00"]), "answer 1 of 1: PTR data of 3 bytes holds a name of 4"),
    (
        reply(QUERY, [b"\xc0\x0c" + RR_PTR(4) + b"\x01a\x00\x00"]),
        "answer 1 of 1: PTR data of 4 bytes holds a name of 3",
    ),
]


@pytest.mark.parametrize("data, message", MALFORMED, ids=[message[:50] for _, message in MALFORMED])
def test_malformed_replies_raise_one_dns_error(data, message):
    with pytest.raises(DnsError) as error:
        decode_answers(data, QUERY)
    assert message in str(error.value)


def test_a_query_for_a_name_dns_cannot_carry_is_refused():
    with pytest.raises(DnsError, match="every label must be 1-63 ASCII characters"):
        encode_query("tasks." + "x" * 64, TYPE_A, 1)
    with pytest.raises(DnsError, match="longer than 255 bytes"):
        encode_query(".".join(["x" * 60] * 5), TYPE_A, 1)


def test_reverse_name_and_slot():
    assert reverse_name("10.201.0.5") == "5.0.201.10.in-addr.arpa"
    assert slot_of("st_web.3.k2j3.st_collapsar", "st_web") == 3
    assert slot_of("st_web2.3.k2j3", "st_web") is None
    assert slot_of("st_web.x.k2j3", "st_web") is None
    assert slot_of("st_web.\u00b2.k2j3", "st_web") is None  # a digit to isdigit(), not to int()
