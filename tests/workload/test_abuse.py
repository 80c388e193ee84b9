"""A node under abuse: each test performs an attack on the real wl-node and
asserts what the node holds afterwards (RSS from /proc, descriptors from
/proc/PID/fd) and what it counted.  Before the caps, a 50-byte request
could make the node allocate a 256 MiB reply, eight clients that never read
grew it by 3 GiB in 8 s, a COMPUTE of an hour took a worker for an hour and
every forward target kept a descriptor forever (those are in
test_abuse_conns.py)."""

import socket
import time

import pytest
import wl_wire as wire
from wl_probe import MIB, ask, connect, forward_request, status_kib
from wl_support import SANITIZER_ENV

# ASan keeps 256 MiB of freed memory in quarantine by default, which would
# show up as RSS; a small quarantine makes RSS reflect what the node holds.
SMALL_QUARANTINE = {"ASAN_OPTIONS": SANITIZER_ENV["ASAN_OPTIONS"] + ":quarantine_size_mb=4"}


def test_a_256_mib_reply_is_refused_at_no_cost(start_node):
    node = start_node(env=SMALL_QUARANTINE)
    base = status_kib(node.proc.pid, "VmRSS")
    with connect(node) as s:  # never reads the reply before measuring
        s.sendall(wire.request(wire.chain(), req_id=7, reply_len=256 * MIB))
        time.sleep(0.5)
        assert status_kib(node.proc.pid, "VmHWM") - base < 8 * 1024  # was +256 MiB
        assert wire.read_reply(s) == (7, wire.ERR, 48)
    stats = node.stats()
    assert (stats["over_reply"], stats["requests"], stats["replies"], stats["bytes_out"]) == (1, 1, 1, 48)


def test_reply_cap_is_exact_and_configurable(start_node):
    node = start_node("--max-reply", "1m")
    assert ask(node, wire.request(wire.chain(), req_id=1, reply_len=MIB)) == (1, wire.OK, MIB)
    assert ask(node, wire.request(wire.chain(), req_id=2, reply_len=MIB + 1)) == (2, wire.ERR, 48)
    assert node.stats()["over_reply"] == 1


def test_default_caps_are_distwalks_16_mib(start_node):
    node = start_node()
    assert ask(node, wire.request(wire.chain(), req_id=1, reply_len=16 * MIB)) == (1, wire.OK, 16 * MIB)
    assert ask(node, wire.request(wire.chain(), req_id=2, reply_len=16 * MIB + 1))[1] == wire.ERR
    empty = len(wire.request(wire.chain()))
    assert ask(node, wire.request(wire.chain(), req_id=3, pad=16 * MIB - empty))[:2] == (3, wire.OK)
    assert ask(node, wire.request(wire.chain(), req_id=4, pad=16 * MIB - empty + 1))[:2] == (4, wire.ERR)
    stats = node.stats()
    assert (stats["over_reply"], stats["over_request"]) == (1, 1)


def test_slow_reader_of_big_replies_costs_no_memory(start_node):
    node = start_node(env=SMALL_QUARANTINE)
    base = status_kib(node.proc.pid, "VmRSS")
    with connect(node) as s:
        s.sendall(b"".join(wire.request(wire.chain(), req_id=i, reply_len=16 * MIB) for i in range(20)))
        time.sleep(1.0)  # 320 MiB of replies owed; the padding is never stored
        assert status_kib(node.proc.pid, "VmHWM") - base < 8 * 1024
        assert [wire.read_reply(s) for _ in range(20)] == [(i, wire.OK, 16 * MIB) for i in range(20)]


def test_longer_request_is_answered_err_and_skipped_unread(start_node):
    node = start_node("--max-request", "64k")
    with connect(node) as s:
        s.sendall(wire.request(wire.chain(), req_id=1, pad=MIB) + wire.request(wire.chain(), req_id=2))
        assert [wire.read_reply(s) for _ in range(2)] == [(1, wire.ERR, 48), (2, wire.OK, 48)]
    stats = node.stats()
    assert (stats["over_request"], stats["requests"], stats["malformed"], stats["bytes_in"]) == (1, 2, 0, 2 * 50 + MIB)


@pytest.mark.timing  # a latency bound on a shared box
def test_compute_above_the_cap_is_refused_at_once(start_node, run_client):
    node = start_node("--max-compute", "50ms")
    start = time.monotonic()
    assert ask(node, wire.request(wire.chain(wire.op_compute(3600 * 10**9)), req_id=1)) == (1, wire.ERR, 48)
    two = wire.chain(wire.op_compute(30 * 10**6), wire.op_compute(30 * 10**6))  # 60 ms together
    assert ask(node, wire.request(two, req_id=2)) == (2, wire.ERR, 48)
    assert time.monotonic() - start < 1.0  # neither ran
    assert ask(node, wire.request(wire.chain(wire.op_compute(40 * 10**6)), req_id=3)) == (3, wire.OK, 48)
    res = run_client("--to", node.addr, "-C", "100ms", "-n", 3)
    assert (res["ok"], res["err"]) == (0, 3)
    assert node.stats()["over_compute"] == 5


def test_default_compute_cap_is_60_s(start_node):
    node = start_node()
    with connect(node) as s:
        s.sendall(wire.request(wire.chain(wire.op_compute(61 * 10**9)), req_id=1))
        s.settimeout(2)  # before the cap the worker was busy for a minute
        assert wire.read_reply(s) == (1, wire.ERR, 48)
    assert node.stats()["over_compute"] == 1


def test_forward_padding_above_the_cap_is_refused(start_node):
    gateway, target = start_node(env=SMALL_QUARANTINE), start_node()
    base = status_kib(gateway.proc.pid, "VmRSS")
    assert ask(gateway, forward_request(target.port, pad=200 * MIB)) == (1, wire.ERR, 48)
    assert status_kib(gateway.proc.pid, "VmHWM") - base < 8 * 1024  # was +200 MiB
    assert gateway.stats()["over_request"] == 1
    assert target.stats()["accepted"] == 0  # refused before anything was sent


def test_forward_request_size_cap_is_exact(start_node):
    gateway, target = start_node("--max-request", "64k"), start_node()
    sub = wire.chain(wire.op_compute(0))
    fits = 64 * 1024 - (wire.HDR.size + 4 + len(sub))  # header, reply_len, chain, padding
    assert ask(gateway, forward_request(target.port, sub=sub, pad=fits))[:2] == (1, wire.OK)
    assert ask(gateway, forward_request(target.port, sub=sub, pad=fits + 1))[:2] == (1, wire.ERR)
    assert gateway.stats()["over_request"] == 1
    assert target.stats()["bytes_in"] == 64 * 1024


def test_big_forward_padding_to_a_target_that_never_reads(start_node):
    gateway = start_node(env=SMALL_QUARANTINE)
    with socket.socket() as sink:  # accepts connections, never reads them
        sink.bind(("127.0.0.1", 0))
        sink.listen(4)
        base = status_kib(gateway.proc.pid, "VmRSS")
        with connect(gateway) as s:
            for i in range(20):  # 20 x 16 MiB owed to the sink
                s.sendall(forward_request(sink.getsockname()[1], req_id=i, pad=16 * MIB - 100, timeout_us=20_000))
                assert wire.read_reply(s) == (i, wire.TIMEOUT, 48)
        assert status_kib(gateway.proc.pid, "VmHWM") - base < 8 * 1024


def test_target_that_never_reads_gets_at_most_the_backlog(start_node):
    gateway = start_node("--max-backlog", "64k", env=SMALL_QUARANTINE)
    # 48 KiB of sub-chain per forward (stored, unlike padding): 16 targets of 250 ops.
    leaf = wire.chain(*[wire.op_compute(0)] * 250)
    sub = wire.chain(wire.op_forward([(1, leaf)] * 16, nack=1))
    base = status_kib(gateway.proc.pid, "VmRSS")
    statuses = []
    with socket.socket() as sink:  # accepts, never reads
        sink.bind(("127.0.0.1", 0))
        sink.listen(4)
        with connect(gateway) as s:
            # The kernel's buffers take a few MiB first; then the gateway's queue fills.
            while statuses.count(wire.ERR) < 20:
                assert len(statuses) < 400, statuses
                s.sendall(forward_request(sink.getsockname()[1], req_id=len(statuses), sub=sub, timeout_us=5_000))
                statuses.append(wire.read_reply(s)[1])
    first_err = statuses.index(wire.ERR)
    assert first_err > 0 and set(statuses[:first_err]) == {wire.TIMEOUT}
    assert set(statuses[first_err:]) == {wire.ERR}  # full, and it stays full: it never reads
    assert status_kib(gateway.proc.pid, "VmHWM") - base < 16 * 1024
    stats = gateway.stats()
    assert (stats["over_backlog"], stats["fwd_timeouts"]) == (20, first_err)


def test_udp_requests_cannot_park_unbounded_work(start_node):
    node = start_node("-b", "udp://127.0.0.1:0", "--max-backlog", "64k")
    with socket.socket() as sink, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        sink.bind(("127.0.0.1", 0))
        sink.listen(4)
        # Each request parks a job for 5 s (a forward to a target that never answers).
        park = forward_request(sink.getsockname()[1], timeout_us=5_000_000)
        for _ in range(20):
            for _ in range(50):
                client.sendto(park, ("127.0.0.1", node.udp_port))
            time.sleep(0.01)
        time.sleep(0.3)
        stats = node.stats()
    # A parked job holds about 0.5 KiB: 64 KiB parks ~120 jobs, the rest get ERR at once.
    assert stats["forwards"] <= 130 and stats["over_backlog"] >= 1000 - 130 - 300  # some datagrams may drop
    assert stats["requests"] == stats["forwards"] + stats["over_backlog"]


@pytest.mark.timing  # a latency bound on a shared box
def test_clients_that_never_read_do_not_grow_the_node(start_node, run_client):
    node = start_node(env=SMALL_QUARANTINE)
    base = status_kib(node.proc.pid, "VmRSS")
    # 4 KiB replies are the worst case: their padding is stored with them.
    burst = b"".join(wire.request(wire.chain(), req_id=i, reply_len=4096) for i in range(100))
    hogs = [connect(node, rcvbuf=65536) for _ in range(8)]
    for s in hogs:
        s.setblocking(False)
    sent = [0] * len(hogs)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        for i, s in enumerate(hogs):
            try:
                sent[i] += s.send(burst)
            except BlockingIOError:
                pass
        time.sleep(0.005)
    # Each stalled connection holds at most --max-backlog (1 MiB, in a buffer
    # grown by doubling: 2 MiB) plus a 64 KiB read: 8 x 2.1 MiB, plus slack.
    grown_kib = status_kib(node.proc.pid, "VmHWM") - base
    assert grown_kib < 48 * 1024, grown_kib  # was +3 GiB in 8 s with 1 MiB replies
    res = run_client("--to", node.addr, "-C", "0", "-n", 200)  # another client, meanwhile
    assert res["ok"] == 200 and res.lat["p50"] < 5000
    stats = node.stats()
    assert stats["paused"] >= 8 and stats["closed"] == 1  # wl-client's; every hog is still open
    for s in hogs:
        s.close()


def test_stalled_client_gets_every_reply_in_order_when_it_reads(start_node):
    node = start_node("--max-backlog", "64k")
    n = 3000  # 12 MiB of 4 KiB replies: far more than the backlog and the socket buffers
    with connect(node, rcvbuf=65536) as s:
        s.sendall(b"".join(wire.request(wire.chain(), req_id=i, reply_len=4096) for i in range(n)))
        time.sleep(0.5)
        assert node.stats()["requests"] < n  # stalled: the rest waits in the socket
        assert [wire.read_reply(s) for _ in range(n)] == [(i, wire.OK, 4096) for i in range(n)]
    stats = node.stats()
    assert stats["requests"] == n and stats["replies"] == n and stats["paused"] >= 1


def test_half_closed_client_still_gets_every_reply(start_node):
    # Before, the node closed at the client's FIN with replies unsent: the
    # client got 462 of 2000 (and the node counted 2000 replies).
    node = start_node()
    n = 2000
    with connect(node, rcvbuf=65536) as s:
        s.sendall(b"".join(wire.request(wire.chain(), req_id=i, reply_len=4096) for i in range(n)))
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.5)
        assert [wire.read_reply(s) for _ in range(n)] == [(i, wire.OK, 4096) for i in range(n)]
        assert wire.read_reply(s) is None  # then the node closes
    stats = node.stats()
    assert (stats["replies"], stats["truncated"], stats["closed"]) == (n, 0, 1)
