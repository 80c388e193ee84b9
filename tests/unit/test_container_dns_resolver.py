"""The overlay-DNS resolver over UDP, against a small DNS server on loopback
(real sockets) that can also answer from another address or port: forged
replies dropped, answers of another type not taken, timeouts, late replies
to another question, malformed replies and nothing listening, each a
DnsError that names the server and the question.  And how a run lives with
it: an outage said once (and its end), and instances on other nodes taken as
destinations, not cores."""

import io
import socket
import struct
import threading

import pytest
from container_dns_support import END, RR_A, RR_PTR, a_record, reply
from test_container_run import (
    bindings,  # noqa: F401 (a fixture, used by name)
    make_run,
    seen,
)

from collapsar.manager.container.dnsaddr import DnsAddresses, OutageReport, Resolver, reverse_name
from collapsar.manager.container.dnswire import TYPE_A, TYPE_PTR, DnsError


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


def test_instances_on_other_nodes_are_destinations_not_cores(bindings):  # noqa: F811
    run = make_run()
    run._reconcile({"a": seen("a")}, remote={"b": "10.0.0.3", "c": "10.0.0.4", "zz": "10.0.0.99"})
    assert sorted(run.shaped) == ["a"]
    assert run.remote == {"b": "10.0.0.3", "c": "10.0.0.4"}  # not an instance of this experiment: ignored
    assert set(run.shaped["a"].core.tree.shapings) == {"10.0.0.3", "10.0.0.4"}
