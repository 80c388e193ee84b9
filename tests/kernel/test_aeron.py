"""Real media drivers, real clients: metadata over aeron:ipc between two
processes, over aeron:udp between two drivers in two namespaces, and a killed
or hung driver that the Transport reports, restarts, and talks through again.

Needs scripts/build-aeron.sh to have run (the tests fail, not skip, otherwise)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from collapsar.errors import EnvironmentProblem
from collapsar.manager.sharing.aeron import AeronError, Client, aeron_home, ipc_channel, udp_channel
from collapsar.manager.sharing.driver import MediaDriver
from collapsar.manager.sharing.metadata import Codec, FlowReport, Inbox, Message
from collapsar.manager.sharing.transport import Transport

pytestmark = pytest.mark.timing  # waits for a lost driver to be noticed and replaced

TAG = 0x5EED0006
KEY = b"test_aeron's run key, 32 bytes.."
CODEC = Codec(TAG, 300, instances=3, key=KEY)  # > 255 links: two-byte link ids on the wire


def message(sender, sequence):
    return Message(
        sender, sequence, (FlowReport((sequence % 300, 299), 1_000_000 * (sequence + 1)), FlowReport((7,), 250_000))
    )


def shm_dir(tag):
    return f"/dev/shm/cx-aeron-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def drivers():
    started = []

    def start(tag, prefix=()):
        driver = MediaDriver(shm_dir(tag), prefix=prefix)
        driver.start()
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.stop()
        assert not driver.aeron_dir.exists(), f"{driver.aeron_dir} left behind"
        driver.log_path.unlink(missing_ok=True)


def pump(endpoints, until, timeout_s=15.0):
    """Run the clients' duty cycles until `until()` holds or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for endpoint in endpoints:
            endpoint()
        if until():
            return True
        time.sleep(0.002)
    return False


def offer_until_taken(client, publication, payload, timeout_s=15.0):
    assert pump([client.do_work], lambda: publication.offer(payload), timeout_s), (
        f"{publication.channel}: never taken (connected={publication.is_connected()})"
    )


ECHO = textwrap.dedent(
    """
    import json, sys, time
    from collapsar.manager.sharing.aeron import Client, ipc_channel
    from collapsar.manager.sharing.metadata import Codec, Inbox, Message
    aeron_dir, count = sys.argv[1], int(sys.argv[2])
    client = Client(aeron_dir, name="echo")
    inbound = client.add_subscription(ipc_channel(), 1001)
    outbound = client.add_publication(ipc_channel(), 1002)
    codec = Codec(%d, 300, instances=3, key=%r)
    inbox, seen = Inbox(codec), []
    deadline = time.monotonic() + 20
    while len(seen) < count and time.monotonic() < deadline:
        client.do_work()
        for data in inbound.poll():
            got = inbox.accept(data)
            seen.append(got.sequence)
            reply = codec.encode(Message(2, got.sequence, got.flows))
            while not outbound.offer(reply):
                client.do_work()
        time.sleep(0.001)
    print(json.dumps({"seen": seen, "dropped": dict(inbox.dropped)}))
    client.close()
"""  # noqa: UP031 - the template is Python source: braces are its own
    % (TAG, KEY)
)


def test_two_processes_exchange_metadata_over_ipc(drivers):
    driver = drivers("ipc")
    count = 20
    echo = subprocess.Popen(
        [sys.executable, "-c", ECHO, str(driver.aeron_dir), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = Client(driver.aeron_dir)
    try:
        outbound = client.add_publication(ipc_channel(), 1001)
        inbound = client.add_subscription(ipc_channel(), 1002)
        # Wait for the echo's subscription before sending, so nothing is offered into the void.
        assert pump([client.do_work], outbound.is_connected), "echo process never subscribed"
        inbox = Inbox(CODEC)
        replies = []
        for sequence in range(count):
            offer_until_taken(client, outbound, CODEC.encode(message(1, sequence)))
        assert pump(
            [client.do_work],
            lambda: replies.extend(filter(None, map(inbox.accept, inbound.poll()))) or len(replies) >= count,
        )
    finally:
        client.close()
    out, err = echo.communicate(timeout=30)
    assert echo.returncode == 0, err
    report = json.loads(out)
    assert report == {"seen": list(range(count)), "dropped": {}}
    assert [r.sequence for r in replies] == list(range(count))
    assert all(r.sender_id == 2 and r.flows == message(1, r.sequence).flows for r in replies)
    assert inbox.dropped == {}


def rx_bytes(ns, ifname):
    path = f"/sys/class/net/{ifname}/statistics/rx_bytes"
    return int(
        subprocess.run(["ip", "netns", "exec", ns, "cat", path], check=True, capture_output=True, text=True).stdout
    )


def udp_pair(make_netns_pair, drivers, driver_timeout_ms=2000):
    """Two drivers in two namespaces, each subscribed on its own address and
    publishing to the other's: the multi-host layout on one machine."""
    pair = make_netns_pair()
    a_ip, b_ip = pair.src_ip, pair.dst_ips[0]
    a = Transport(drivers("udp-a", ("ip", "netns", "exec", pair.src_ns)), driver_timeout_ms=driver_timeout_ms)
    b = Transport(drivers("udp-b", ("ip", "netns", "exec", pair.dst_ns)), driver_timeout_ms=driver_timeout_ms)
    for transport, mine, theirs in ((a, a_ip, b_ip), (b, b_ip, a_ip)):
        transport.start()
        transport.add("subscription", udp_channel(f"{mine}:40100"), 7)
        transport.add("publication", udp_channel(f"{theirs}:40100"), 7)
    return pair, a, b


def exchange(a, b, sequence, inbox, timeout_s=20.0):
    """a and b each send message `sequence` until the other has it; returns what
    each accepted.  `inbox` persists across calls: it drops the extra copies
    offered while waiting, and any copy the log still holds after a restart."""
    got = {"a": [], "b": []}
    payload = {"a": CODEC.encode(message(1, sequence)), "b": CODEC.encode(message(2, sequence))}

    def step():
        for name, transport, other in (("a", a, "b"), ("b", b, "a")):
            if not got[other]:
                transport.offer(payload[name])
            got[name] += [m for m in map(inbox[name].accept, transport.poll()) if m]

    assert pump([step], lambda: got["a"] and got["b"], timeout_s), f"no exchange of message {sequence}: {got}"
    return got


def test_two_drivers_exchange_metadata_over_udp_between_namespaces(make_netns_pair, drivers):
    pair, a, b = udp_pair(make_netns_pair, drivers)
    try:
        before = rx_bytes(pair.dst_ns, pair.dst_if)
        got = exchange(a, b, 5, {"a": Inbox(CODEC), "b": Inbox(CODEC)})
        assert got["b"][0] == message(1, 5)
        assert got["a"][0] == message(2, 5)
        # The metadata really crossed the veth between the namespaces.
        assert rx_bytes(pair.dst_ns, pair.dst_if) - before >= len(CODEC.encode(message(1, 5)))
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_lost_driver_is_reported_restarted_and_sharing_resumes(make_netns_pair, drivers, how):
    pair, a, b = udp_pair(make_netns_pair, drivers, driver_timeout_ms=1000)
    reports = []
    a.on_driver_lost = reports.append
    inbox = {"a": Inbox(CODEC), "b": Inbox(CODEC)}
    try:
        exchange(a, b, 1, inbox)
        old_pid = a.driver.pid
        if how == "killed":
            os.kill(old_pid, signal.SIGKILL)
        else:
            os.kill(old_pid, signal.SIGSTOP)  # alive but silent: only the keepalive tells
        assert pump([a.poll], lambda: reports, timeout_s=10), "the lost driver went unnoticed"
        expected = "exited (status -9)" if how == "killed" else "stopped answering (MediaDriver keepalive"
        assert reports == [a.failures[0]] and f"media driver pid {old_pid} {expected}" in reports[0]
        assert a.driver.alive() and a.driver.pid != old_pid
        got = exchange(a, b, 2, inbox, timeout_s=30)
        assert got["a"][0] == message(2, 2) and got["b"][0] == message(1, 2)
        assert len(reports) == 1
    finally:
        a.close()
        b.close()


def test_no_driver_is_an_aeron_error_naming_the_dir(tmp_path):
    with pytest.raises(AeronError, match=f"connecting to the media driver in {tmp_path}"):
        Client(tmp_path, driver_timeout_ms=200)


def test_unbuilt_aeron_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("COLLAPSAR_AERON_HOME", str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="fix: run scripts/build-aeron.sh"):
        aeron_home()


def test_driver_dies_with_the_manager_that_started_it(tmp_path):
    # A manager killed by SIGKILL cannot stop its driver: the driver gets
    # SIGTERM from the kernel (PR_SET_PDEATHSIG), shuts down, removes its dir.
    aeron_dir = shm_dir("orphan")
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from collapsar.manager.sharing.driver import MediaDriver
        driver = MediaDriver({aeron_dir!r}, log_path={str(tmp_path / "driver.log")!r})
        driver.start()
        print(driver.pid, flush=True)
        time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(starter.stdout.readline())
        assert os.path.exists(f"/proc/{pid}")
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(aeron_dir):
            time.sleep(0.05)
        assert not os.path.exists(aeron_dir), "the driver outlived its manager"
        assert "Shutting down driver" in (tmp_path / "driver.log").read_text()
    finally:
        starter.kill()
        starter.wait()
