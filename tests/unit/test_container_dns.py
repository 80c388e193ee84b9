"""The overlay-DNS address source: the wire format of its queries and
replies (A, PTR, name compression), malformed and forged replies, and how
task names become instances.  The UDP tests talk to a small resolver on
loopback (real sockets), which can also answer from another address."""

import io
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_container_run import (
    bindings,  # noqa: F401 (a fixture, used by name)
    make_run,
    seen,
)

from collapsar.manager.container.dnsaddr import DnsAddresses, OutageReport, Resolver, reverse_name, slot_of
from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, DnsError, decode_answers, encode_query, read_name


def test_query_is_one_question_with_recursion_desired():
    assert encode_query("tasks.st_web", TYPE_A, 0x1234) == (
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05tasks\x06st_web\x00\x00\x01\x00\x01"
    )


def reply(query: bytes, answers: list[bytes], flags: int = 0x8180, qdcount: int = 1) -> bytes:
    """A reply to `query` that echoes its question."""
    header = query[:2] + struct.pack("!HHHHH", flags, qdcount, len(answers), 0, 0)
    return header + query[12:] + b"".join(answers)


def a_record(ip: list[int], owner: bytes = b"\xc0\x0c") -> bytes:
    return owner + struct.pack("!HHIH", TYPE_A, 1, 600, 4) + bytes(ip)


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


QUERY = encode_query("tasks.st_web", TYPE_A, 0x0101)
END = len(QUERY)  # where the first answer starts
RR_A = struct.pack("!HHIH", TYPE_A, 1, 600, 4)
RR_PTR = lambda length: struct.pack("!HHIH", TYPE_PTR, 1, 600, length)  # noqa: E731


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


# ---- fuzzing: whatever arrives, only a DnsError leaves the parser ---------------

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


# ---- over UDP, against a resolver on loopback ----------------------------------


class FakeResolver:
    """A DNS server on 127.0.0.1 that sends, for each query, what `respond(query)`
    lists: (source, datagram), the source being "asked" (the address the client
    asked), "other-port" (127.0.0.1, another port) or "other-address" (127.0.0.2)."""

    def __init__(self, respond):
        self.respond = respond
        self.queries: list[bytes] = []
        self.sockets = {
            source: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for source in ("asked", "other-port", "other-address")
        }
        self.sockets["asked"].bind(("127.0.0.1", 0))
        self.sockets["other-port"].bind(("127.0.0.1", 0))
        self.sockets["other-address"].bind(("127.0.0.2", 0))
        self.sockets["asked"].settimeout(0.05)
        self.address = self.sockets["asked"].getsockname()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-dns", daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._closing.is_set():
            try:
                query, client = self.sockets["asked"].recvfrom(512)
            except TimeoutError:
                continue
            self.queries.append(query)
            for source, data in self.respond(query):
                self.sockets[source].sendto(data, client)

    def close(self):
        self._closing.set()
        self._thread.join()
        for sock in self.sockets.values():
            sock.close()


@pytest.fixture
def resolver():
    made: list[FakeResolver] = []
    yield lambda respond: made.append(FakeResolver(respond)) or made[-1]
    for server in made:
        server.close()


def test_forged_replies_from_another_address_or_port_are_dropped(resolver):
    def respond(query):
        forged = reply(query, [a_record([6, 6, 6, 6])])  # right id, right question: only the source is wrong
        return [("other-address", forged), ("other-port", forged), ("asked", reply(query, [a_record([10, 0, 0, 5])]))]

    server = resolver(respond)
    with Resolver(server.address, timeout_s=2.0) as dns:
        assert dns.ask("tasks.st_web", TYPE_A) == ["10.0.0.5"]
    assert len(server.queries) == 1


def test_answers_of_another_type_than_asked_are_not_taken(resolver):
    target = b"\x0ast_b.1.xyz\x00"
    ptr = b"\xc0\x0c" + RR_PTR(len(target)) + target  # no address: never taken for one
    server = resolver(lambda query: [("asked", reply(query, [ptr, a_record([10, 0, 0, 5])]))])
    with Resolver(server.address, timeout_s=2.0) as dns:
        assert dns.ask("tasks.st_web", TYPE_A) == ["10.0.0.5"]
        assert dns.ask(reverse_name("10.0.0.5"), TYPE_PTR) == ["st_b.1.xyz"]


def test_only_forged_replies_time_out(resolver):
    server = resolver(
        lambda query: [
            ("other-address", reply(query, [a_record([6, 6, 6, 6])])),
            ("other-port", reply(query, [a_record([6, 6, 6, 6])])),
        ]
    )
    with Resolver(server.address, timeout_s=0.3) as dns, pytest.raises(DnsError) as error:
        dns.ask("tasks.st_web", TYPE_A)
    assert str(error.value) == f"DNS 127.0.0.1:{server.address[1]}: A tasks.st_web: no reply within 0.3 s"


def test_a_late_reply_to_another_question_is_skipped(resolver):
    def respond(query):
        stale = bytes([query[0] ^ 0xFF]) + reply(query, [a_record([10, 9, 9, 9])])[1:]
        return [("asked", stale), ("asked", reply(query, [a_record([10, 0, 0, 5])]))]

    server = resolver(respond)
    with Resolver(server.address, timeout_s=2.0) as dns:
        assert dns.ask("tasks.st_web", TYPE_A) == ["10.0.0.5"]


def test_a_malformed_reply_names_the_server_and_the_question(resolver):
    server = resolver(lambda query: [("asked", reply(query, [b"\xc0\x0c" + RR_A[:6]]))])
    with Resolver(server.address, timeout_s=2.0) as dns, pytest.raises(DnsError) as error:
        dns.ask("tasks.st_web", TYPE_A)
    assert str(error.value) == (
        f"DNS 127.0.0.1:{server.address[1]}: A tasks.st_web: answer 1 of 1: record at "
        f"byte {END + 2} is cut off by the end of the reply ({END + 8} bytes)"
    )


def test_nothing_listening_is_a_dns_error():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: the kernel answers port unreachable
    with Resolver(("127.0.0.1", port), timeout_s=2.0) as dns, pytest.raises(DnsError) as error:
        dns.ask("tasks.st_web", TYPE_A)
    assert str(error.value) == f"DNS 127.0.0.1:{port}: A tasks.st_web: Connection refused"


def swarm_dns(healthy: dict):
    """Answers as Swarm's DNS does for one task st_b.1 at 10.0.0.3, or (while
    healthy["now"] is False) with a reply cut after 5 bytes."""

    def respond(query):
        if not healthy["now"]:
            return [("asked", reply(query, [])[:5])]
        if query.endswith(struct.pack("!HH", TYPE_A, 1)):
            return [("asked", reply(query, [a_record([10, 0, 0, 3])]))]
        target = b"\x0ast_b.1.xyz\x06st_net\x00"
        return [("asked", reply(query, [b"\xc0\x0c" + RR_PTR(len(target)) + target]))]

    return respond


def test_a_dns_outage_is_said_once_and_the_run_goes_on(bindings, resolver):  # noqa: F811
    healthy = {"now": False}
    server = resolver(swarm_dns(healthy))
    run = make_run()
    run.out = io.StringIO()
    run.view.scan = lambda: {"a": seen("a")}
    run.remote_addresses = DnsAddresses(None, "st", ["b"], timeout_s=2.0, server=server.address)
    for _ in range(3):  # three rescans while the DNS answers garbage
        run.scan()
    assert run.out.getvalue().splitlines() == [
        f"warning: overlay DNS: DNS 127.0.0.1:{server.address[1]}: A tasks.st_b: reply of 5 bytes is "
        "shorter than a DNS header (12) (retried at every rescan; said again once it works)"
    ]
    assert sorted(run.shaped) == ["a"] and run.remote == {}
    healthy["now"] = True
    run.scan()
    assert run.out.getvalue().splitlines()[-1] == "overlay DNS: works again"
    assert run.remote == {"b": "10.0.0.3"}
    assert "10.0.0.3" in run.shaped["a"].core.tree.shapings
    healthy["now"] = False
    run.scan()  # the last addresses hold through the next outage
    assert run.remote == {"b": "10.0.0.3"} and run.out.getvalue().count("warning: overlay DNS") == 2


def test_outage_report_says_each_outage_once():
    said: list[str] = []
    report = OutageReport("finding the other managers", said.append)

    def fail():
        raise DnsError("DNS 10.0.0.1:53: A tasks.st_x: no reply within 1 s")

    assert report.attempt(fail, []) == [] and report.attempt(fail, []) == []
    assert report.attempt(lambda: ["10.0.0.7:7070"], []) == ["10.0.0.7:7070"]
    assert report.attempt(fail, ["kept"]) == ["kept"]
    assert said == [
        "warning: finding the other managers: DNS 10.0.0.1:53: A tasks.st_x: no reply within 1 s "
        "(retried at every rescan; said again once it works)",
        "finding the other managers: works again",
        "warning: finding the other managers: DNS 10.0.0.1:53: A tasks.st_x: no reply within 1 s "
        "(retried at every rescan; said again once it works)",
    ]


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


def test_instances_on_other_nodes_are_destinations_not_cores(bindings):  # noqa: F811
    run = make_run()
    run._reconcile({"a": seen("a")}, remote={"b": "10.0.0.3", "c": "10.0.0.4", "zz": "10.0.0.99"})
    assert sorted(run.shaped) == ["a"]
    assert run.remote == {"b": "10.0.0.3", "c": "10.0.0.4"}  # not an instance of this experiment: ignored
    assert set(run.shaped["a"].core.tree.shapings) == {"10.0.0.3", "10.0.0.4"}
