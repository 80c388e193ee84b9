"""Bad input never hurts a node: malformed, truncated and oversized requests
close their connection and are counted; UDP, long sessions, many
connections, signals, client timeouts and scheduling options."""

import json
import random
import signal
import socket
import struct
import subprocess
import time

import pytest
import wl_wire as wire
from wl_support import sanitizer_env

GOOD = wire.request(wire.chain(wire.op_compute(0)), req_id=5)


def closed_by_peer(sock, timeout=5):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def send_and_expect_close(node, payload):
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.sendall(payload)
        assert closed_by_peer(s)


def still_serves(node):
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.sendall(GOOD)
        assert wire.read_reply(s)[:2] == (5, wire.OK)


BAD = {
    "bad magic": wire.request(wire.chain(), magic=0xDEADBEEF),
    "bad version": wire.request(wire.chain(), version=9),
    "reply type": wire.request(wire.chain(), msg_type=wire.REPLY),
    "length too small": wire.request(wire.chain(), length=10),
    "unknown op": wire.request(struct.pack(">HBBH", 1, 99, 0, 0)),
    "op body short": wire.request(struct.pack(">HBBH", 1, wire.COMPUTE, 0, 4) + bytes(4)),
    "op past chain end": wire.request(struct.pack(">HBBH", 1, wire.COMPUTE, 0, 8) + bytes(3)),
    "nops lies": wire.request(struct.pack(">H", 3) + wire.op_compute(0)),
    "nack above targets": wire.request(wire.chain(wire.op_forward([(1, wire.chain())], nack=2))),
    "nack zero": wire.request(wire.chain(wire.op_forward([(1, wire.chain())], nack=0))),
    "store flags": wire.request(wire.chain(wire.op_io(wire.STORE, 0, 10, flags=7))),
    "io too big": wire.request(wire.chain(wire.op_io(wire.LOAD, 0, 1 << 30))),
}


def nested(depth):
    sub = wire.chain()
    for _ in range(depth):
        sub = wire.chain(wire.op_forward([(1, sub)], nack=1))
    return wire.request(sub)


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_request_closes_and_is_counted(start_node, name):
    node = start_node()
    send_and_expect_close(node, BAD[name])
    stats = node.stats()
    assert stats["malformed"] == 1 and stats["requests"] == 0
    still_serves(node)


def test_forward_nesting_limit(start_node):
    node = start_node()
    send_and_expect_close(node, nested(9))  # 9 forward levels + the top chain
    assert node.stats()["malformed"] == 1


def test_truncated_request_is_counted(start_node):
    node = start_node()
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.sendall(GOOD[: len(GOOD) - 3])
    time.sleep(0.2)
    assert node.stats()["truncated"] == 1
    still_serves(node)


def test_oversized_request_closes_before_its_body(start_node):
    node = start_node()
    head = wire.request(wire.chain(), length=300 << 20)[: wire.HDR.size]
    send_and_expect_close(node, head)
    assert node.stats()["oversized"] == 1
    still_serves(node)


def test_random_garbage_on_many_connections(start_node):
    node = start_node()
    rng = random.Random(4)
    for _ in range(100):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        with socket.create_connection(("127.0.0.1", node.port)) as s:
            s.sendall(blob)
            s.shutdown(socket.SHUT_WR)
            closed_by_peer(s)
    stats = node.stats()
    assert stats["malformed"] + stats["truncated"] == 100
    still_serves(node)


def test_udp_requests_and_bad_datagrams(start_node, run_client):
    node = start_node("-b", "udp://127.0.0.1:0")
    res = run_client("--to", f"udp://127.0.0.1:{node.udp_port}", "-C", "100us", "-n", 500, "-r", 2000)
    assert res["ok"] == 500
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"garbage", ("127.0.0.1", node.udp_port))
        s.sendto(GOOD, ("127.0.0.1", node.udp_port))
        s.settimeout(5)
        data, _ = s.recvfrom(65536)
    assert struct.unpack(">Q", data[12:20])[0] == 5
    assert node.stats()["malformed"] == 1


def test_lost_udp_reply_times_out_instead_of_hanging(run_client):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:  # receives, never answers
        sink.bind(("127.0.0.1", 0))
        port = sink.getsockname()[1]
        start = time.monotonic()
        res = run_client("--to", f"udp://127.0.0.1:{port}", "--timeout", "200ms", "-n", 5, "-r", 50)
    assert res["timeout"] == 5 and res["ok"] == 0
    assert time.monotonic() - start < 5


def test_long_session_hundreds_of_mib(start_node, run_client):
    node = start_node()
    res = run_client("--to", node.addr, "--rs", "1m", "-n", 400, timeout=300)
    assert res["ok"] == 400
    assert node.stats()["bytes_out"] == 400 << 20
    big = run_client("--to", node.addr, "--ps", "8m", "-n", 20, timeout=300)  # large requests too
    assert big["ok"] == 20


def test_many_concurrent_connections(start_node, run_client):
    node = start_node("--nt", "2")
    socks = [socket.create_connection(("127.0.0.1", node.port)) for _ in range(500)]
    try:
        for i, s in enumerate(socks):
            s.sendall(wire.request(wire.chain(wire.op_compute(0)), req_id=i))
        assert [wire.read_reply(s)[0] for s in socks] == list(range(500))
        res = run_client("--to", node.addr, "--nt", 64, "-n", 50, "-r", 200)
        assert res["ok"] == 64 * 50
    finally:
        for s in socks:
            s.close()
    assert node.stats()["accepted"] == 564


@pytest.mark.parametrize("mode", ["child", "shared", "parent"])
@pytest.mark.parametrize("poll", ["epoll", "poll", "select"])
def test_accept_and_poll_modes(start_node, run_client, mode, poll):
    node = start_node("--nt", "2", "--am", mode, "--pm", poll)
    res = run_client("--to", node.addr, "--nt", 4, "--ns", 5, "-n", 50, "-C", "100us")
    assert res["ok"] == 200
    assert node.stats()["accepted"] == 20


@pytest.mark.parametrize("policy", ["other:5", "rr:10", "fifo:1"])
def test_scheduling_policies(start_node, run_client, policy):
    node = start_node("--sched", policy)
    assert run_client("--to", node.addr, "-C", "100us", "-n", 50)["ok"] == 50


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_node_shuts_down_cleanly_on_signal(start_node, sig):
    node = start_node()
    idle = socket.create_connection(("127.0.0.1", node.port))
    still_serves(node)
    assert node.stop(sig) == 0
    assert "wl-node: final requests=1" in node.log()
    assert closed_by_peer(idle)
    idle.close()


def test_sigusr1_reports_live_counters(start_node, run_client):
    node = start_node()
    assert node.stats()["requests"] == 0
    run_client("--to", node.addr, "-n", 7)
    stats = node.stats()
    assert stats["requests"] == 7 and stats["replies"] == 7 and stats["accepted"] == 1


def test_client_stops_on_sigint_and_still_reports(start_node, binaries):
    node = start_node()
    proc = subprocess.Popen(
        [str(binaries["client"]), "--to", node.addr, "-r", "1000", "-n", "100000", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sanitizer_env(),
    )
    time.sleep(1.0)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert time.monotonic() - start < 3
    assert proc.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert 500 <= summary["ok"] <= 2000 and summary["unsent"] == 100000 - summary["requests"]


def test_forward_target_crash_mid_run(start_node, run_client):
    gateway, target = start_node(), start_node()
    assert run_client("--to", gateway.addr, "-F", target.addr, "-n", 5)["ok"] == 5
    target.stop()
    res = run_client("--to", gateway.addr, "-F", f"{target.addr},timeout=1s", "-n", 5)
    assert res["err"] == 5 and res.lat["max"] < 1_000_000
