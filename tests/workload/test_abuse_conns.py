"""A node under a flood of connections or forward targets: each test opens
the connections or names the targets and counts the node's descriptors in
/proc/PID/fd.  Before, every distinct forward target kept a descriptor
forever (300 targets: 300 descriptors), and past the soft descriptor limit
accept() failed with EMFILE and the node spun on its listening socket
(1017 of 1600 clients served, 10 million log lines in 30 s)."""

import resource
import signal
import socket
import subprocess
import time

import pytest
import wl_wire as wire
from wl_probe import ask, connect, forward_request, open_fds
from wl_support import LISTEN_RE, sanitizer_env


def test_connections_over_the_cap_are_closed_and_counted(start_node):
    node = start_node("--max-conns", "20")
    base = open_fds(node)
    socks = [connect(node) for _ in range(30)]
    time.sleep(0.3)
    assert open_fds(node) == base + 20
    closed = 0
    for i, s in enumerate(socks):
        try:
            s.sendall(wire.request(wire.chain(), req_id=i))
            closed += wire.read_reply(s) is None
        except (ConnectionResetError, BrokenPipeError):
            closed += 1
    assert closed == 10
    for s in socks:
        s.close()
    time.sleep(0.3)
    assert ask(node, wire.request(wire.chain(), req_id=99))[:2] == (99, wire.OK)
    stats = node.stats()
    assert (stats["over_conns"], stats["accepted"]) == (10, 21)


def start_limited(binaries, tmp_path, nofile, *args):
    """A node whose RLIMIT_NOFILE starts at nofile = (soft, hard); returns (proc, port, log path)."""
    log_path = tmp_path / "limited.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(binaries["node"]), "-b", "127.0.0.1:0", "-s", str(tmp_path / "limited.storage"), *args],
            stdout=log,
            stderr=log,
            env=sanitizer_env(),
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile),
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        found = LISTEN_RE.findall(log_path.read_text())
        if found:
            return proc, int(found[0][2]), log_path
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    return proc, None, log_path


def stop_limited(proc, log_path):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, log_path.read_text()[-3000:]
    assert "Sanitizer" not in log_path.read_text()


def test_connection_flood_meets_the_cap_not_the_descriptor_limit(binaries, tmp_path):
    # Soft limit 1024, as on most hosts: before, accept() failed with EMFILE
    # past ~1020 connections and the node spun on its listening socket.
    proc, port, log_path = start_limited(binaries, tmp_path, (1024, 20000), "--max-conns", "1500")
    assert port, log_path.read_text()
    socks = []
    try:
        for _ in range(1600):
            s = socket.create_connection(("127.0.0.1", port))
            s.settimeout(10)
            socks.append(s)
        for i, s in enumerate(socks[:1500]):
            s.sendall(wire.request(wire.chain(), req_id=i))
        assert [wire.read_reply(s)[0] for s in socks[:1500]] == list(range(1500))
        assert all(s.recv(1) == b"" for s in socks[1500:])  # the 100 over the cap: closed at once
    finally:
        for s in socks:
            s.close()
    limits = open(f"/proc/{proc.pid}/limits").read()
    assert [ln.split()[3] for ln in limits.splitlines() if ln.startswith("Max open files")] == ["1823"]
    stop_limited(proc, log_path)
    assert "over_conns=100" in log_path.read_text() and "EMFILE" not in log_path.read_text()


def test_default_conns_cap_fits_a_low_hard_limit_and_a_given_one_must(binaries, tmp_path):
    proc, port, log_path = start_limited(binaries, tmp_path, (1000, 1000))
    assert port, log_path.read_text()
    stop_limited(proc, log_path)
    assert "--max-conns lowered to 677: the file descriptor limit is 1000" in log_path.read_text()
    proc, port, log_path = start_limited(binaries, tmp_path, (1000, 1000), "--max-conns", "5000")
    assert port is None and proc.returncode == 1
    assert "need 5323 file descriptors, the hard limit is 1000" in log_path.read_text()


def listeners(n, kind=socket.SOCK_STREAM):
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, kind)
        s.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            s.listen(4)
        out.append(s)
    return out


@pytest.mark.timing  # idle connections closed within a second
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_many_forward_targets_do_not_leak_descriptors(start_node, proto):
    gateway = start_node("--max-fwd-conns", "16", "--fwd-idle", "300ms")
    kind, wire_proto = (socket.SOCK_STREAM, wire.TCP) if proto == "tcp" else (socket.SOCK_DGRAM, wire.UDP)
    targets = listeners(100, kind)  # listen, never answer
    try:
        with connect(gateway) as s:
            s.sendall(wire.request(wire.chain(), req_id=999))
            assert wire.read_reply(s)[0] == 999  # accepted: its descriptor is in base
            base = open_fds(gateway)
            peak = base
            for i, t in enumerate(targets):
                s.sendall(forward_request(t.getsockname()[1], req_id=i, timeout_us=10_000, proto=wire_proto))
                assert wire.read_reply(s) == (i, wire.TIMEOUT, 48)
                peak = max(peak, open_fds(gateway))
            assert peak <= base + 16  # was one descriptor per target, kept forever
            time.sleep(1.0)
            assert open_fds(gateway) == base  # idle ones closed
    finally:
        for t in targets:
            t.close()
    assert gateway.stats()["fwd_closed"] == 100


def test_outbound_cap_refuses_when_every_connection_is_busy(start_node):
    gateway = start_node("--max-fwd-conns", "2")
    targets = listeners(3)
    try:
        ports = [t.getsockname()[1] for t in targets]
        three = wire.chain(wire.op_forward([(p, wire.chain()) for p in ports], nack=1, timeout_us=200_000))
        assert ask(gateway, wire.request(three, req_id=5)) == (5, wire.TIMEOUT, 48)
    finally:
        for t in targets:
            t.close()
    stats = gateway.stats()
    assert (stats["over_fwd_conns"], stats["forwards"], stats["fwd_errors"], stats["fwd_timeouts"]) == (1, 3, 1, 2)


def test_restarting_target_does_not_leak_descriptors(start_node):
    gateway, target = start_node(), start_node()
    port = target.port
    with connect(gateway) as s:
        base = None
        for i in range(10):
            s.sendall(forward_request(port, req_id=i))
            assert wire.read_reply(s) == (i, wire.OK, 48)
            fds = open_fds(gateway)
            base = base or fds
            assert fds == base  # one outbound connection, the current one
            target.stop()
            target = start_node("-b", f"127.0.0.1:{port}")
    assert gateway.stats()["forwards"] == 10
