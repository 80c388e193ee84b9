"""PreparedStep on this host's kernel: a step's netlink requests and signals
are queued while it is prepared and reach the kernel at its deadline, in one
call that leaves the interpreter lock to other threads."""

import signal
import subprocess
import threading
import time

import pytest
from tcal_traffic import classes, filters, run

from collapsar.errors import KernelError
from collapsar.manager.local.supervisor import Launch, Supervisor
from collapsar.tcal import Shaping, ShapingChange, nlsock
from collapsar.tcal.prepared import PreparedStep

pytestmark = pytest.mark.timing  # changes must reach the kernel at their deadline

AHEAD_NS = 300_000_000


@pytest.fixture
def trees(tree_factory):
    """`trees(rates)`: a tree set up with one destination per rate."""

    def make(rates):
        pair, tree = tree_factory(n_dst=len(rates))
        tree.setup([Shaping(ip, rate) for ip, rate in zip(pair.dst_ips, rates)])
        return pair, tree

    return make


def test_queued_changes_reach_the_kernel_at_the_deadline_in_every_namespace(trees):
    (p1, t1), (p2, t2) = trees([10_000_000, 10_000_000]), trees([10_000_000, 10_000_000])
    a1, b1 = p1.dst_ips
    a2, b2 = p2.dst_ips
    t2.cut(b2)
    deadline = time.monotonic_ns() + AHEAD_NS
    with PreparedStep(deadline) as step:
        t1.change_many({a1: ShapingChange.of(rate_bps=20_000_000), b1: ShapingChange.of(rate_bps=5_000_000)})
        t2.restore(b2)
        t2.cut(a2)
    # The trees hold the new state at once (later calls of the step build on it) ...
    assert t1.shapings[a1].rate_bps == 20_000_000 and t1.shapings[b1].rate_bps == 5_000_000
    # ... and the kernel nothing of it yet.
    assert classes(p1.src_ns, p1.src_if)["1:10"]["rate"] == "9843Kbit"
    assert "*flowid 1:2" in _filter_of(p2, b2) and "*flowid 1:10" in _filter_of(p2, a2)
    started, applied, errors = step.fire()
    assert errors == []
    assert deadline <= started <= applied
    got = classes(p1.src_ns, p1.src_if)
    assert (got["1:10"]["rate"], got["1:11"]["rate"]) == ("19687Kbit", "4921Kbit")
    assert "*flowid 1:11" in _filter_of(p2, b2) and "*flowid 1:2" in _filter_of(p2, a2)


@pytest.mark.parametrize("batch_requests", [2000, 1])  # 1: every request a batch of its own
def test_a_refused_request_puts_back_only_its_destination(trees, monkeypatch, batch_requests):
    monkeypatch.setattr(nlsock, "BATCH_REQUESTS", batch_requests)
    pair, tree = trees([10_000_000, 10_000_000])
    a, b = pair.dst_ips
    # Behind the tree's back: a fresh root where only a's class exists.
    run("tc", "qdisc", "del", "dev", pair.src_if, "root", ns=pair.src_ns)
    run("tc", "qdisc", "add", "dev", pair.src_if, "root", "handle", "1:", "htb", ns=pair.src_ns)
    run(
        "tc",
        "class",
        "add",
        "dev",
        pair.src_if,
        "parent",
        "1:",
        "classid",
        "1:10",
        "htb",
        "rate",
        "1mbit",
        ns=pair.src_ns,
    )
    with PreparedStep(time.monotonic_ns()) as step:  # lower rates: class messages only
        tree.change_many({a: ShapingChange.of(rate_bps=5_000_000)})  # two submits: each must get its own refusals
        tree.change_many({b: ShapingChange.of(rate_bps=8_000_000)})
    _, _, errors = step.fire()
    assert len(errors) == 1 and isinstance(errors[0], KernelError)
    assert f"destination {b}: change class 1:11" in str(errors[0]) and "ENOENT" in str(errors[0])
    assert tree.shapings[a].rate_bps == 5_000_000  # accepted: kept
    assert tree.shapings[b].rate_bps == 10_000_000  # refused: back to what the kernel still has
    assert classes(pair.src_ns, pair.src_if)["1:10"]["rate"] == "4921Kbit"


def test_signals_go_at_the_deadline_and_a_vanished_group_is_no_error():
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    try:
        deadline = time.monotonic_ns() + AHEAD_NS
        with PreparedStep(deadline) as step:
            step.signal(sleeper.pid, signal.SIGTERM)
            step.signal(gone.pid, signal.SIGKILL)
        time.sleep(0.05)
        assert sleeper.poll() is None  # still running: the signal waits for the deadline
        started, applied, errors = step.fire()
        assert errors == [] and started >= deadline
        assert sleeper.wait(5) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()


def test_other_threads_run_while_a_step_waits_for_its_deadline(trees):
    pair, tree = trees([10_000_000])
    counted = [0]
    done = threading.Event()

    def count():
        while not done.is_set():
            counted[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        time.sleep(0.02)
        with PreparedStep(time.monotonic_ns() + 200_000_000) as step:
            tree.change_many({pair.dst_ips[0]: ShapingChange.of(rate_bps=20_000_000)})
        before = counted[0]
        _, _, errors = step.fire()
        during = counted[0] - before
    finally:
        done.set()
        thread.join()
    assert errors == []
    # The 200 ms wait holds no interpreter lock: the counting thread went on
    # (tens of thousands of turns per 200 ms even on a loaded 2-core host).
    assert during > 10_000, during


def test_supervisor_signals_a_leave_and_a_crash_at_the_step(tmp_path):
    logs = lambda instance: (tmp_path / f"{instance}.out", tmp_path / f"{instance}.err")  # noqa: E731
    supervisor = Supervisor(logs, prefix=lambda instance: [], on_start=lambda *args: None, grace_s=5)
    supervisor.start(Launch("leaver", ("sleep", "60")))
    supervisor.start(Launch("crasher", ("sleep", "60")))
    try:
        deadline = time.monotonic_ns() + AHEAD_NS
        with PreparedStep(deadline) as step:
            supervisor.stop("leaver")
            supervisor.kill("crasher")
        time.sleep(0.05)
        assert supervisor.poll() == []  # nothing signalled yet
        _, _, errors = step.fire()
        assert errors == []
        exits = []
        end = time.monotonic() + 5
        while len(exits) < 2 and time.monotonic() < end:
            exits += supervisor.poll()
            time.sleep(0.01)
        assert sorted((e.instance, e.returncode, e.how) for e in exits) == [
            ("crasher", -signal.SIGKILL, "crashed"),
            ("leaver", -signal.SIGTERM, "stopped"),
        ]
    finally:
        supervisor.stop_all(0.5)


def test_without_the_library_nothing_is_sent_and_the_trees_go_back(trees, tmp_path, monkeypatch):
    from collapsar.errors import EnvironmentProblem
    from collapsar.tcal import prepared

    pair, tree = trees([10_000_000])
    a = pair.dst_ips[0]
    monkeypatch.setattr(prepared, "LIBRARY_PATH", tmp_path / "libcxfire.so")
    monkeypatch.setattr(prepared, "_lib", None)
    with PreparedStep(time.monotonic_ns()) as step:
        tree.change_many({a: ShapingChange.of(rate_bps=5_000_000)})
    _, _, errors = step.fire()
    assert isinstance(errors[0], EnvironmentProblem) and "run `make -C tcal`" in str(errors[0])
    assert len(errors) == 2 and "ENOPKG" in str(errors[1])  # the tree's own refusal, naming the class
    assert tree.shapings[a].rate_bps == 10_000_000
    assert classes(pair.src_ns, pair.src_if)["1:10"]["rate"] == "9843Kbit"


def _filter_of(pair, ip: str) -> str:
    """The u32 node line (with its flowid) that matches `ip`."""
    last = int(ip.split(".")[3])
    text = filters(pair.src_ns, pair.src_if)
    lines = [line for line in text.splitlines() if f"key ht 101 bkt {last:x} " in line]
    assert len(lines) == 1, text
    return lines[0]
