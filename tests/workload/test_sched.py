"""wl-node --sched: each policy is really applied to the worker thread (read
back from /proc and with chrt -p), SCHED_DEADLINE included, and the kernel's
budget is really enforced; bad specs and refused policies stop the node at
start instead of leaving it running without a worker."""

import os
import pathlib
import re
import subprocess

import pytest
from wl_support import sanitizer_env

pytestmark = pytest.mark.timing  # a deadline task's runtime is enforced

SCHED_POLICY = {"other": 0, "fifo": 1, "rr": 2, "deadline": 6}


def worker_threads(pid):
    """{tid: (policy, nice, priority)} of a process's threads, from /proc."""
    out = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        text = (task / "sched").read_text()
        policy = int(re.search(r"^policy\s+:\s+(\d+)", text, re.M).group(1))
        stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = (policy, int(stat[16]), int(stat[15]))  # nice, priority fields
    return out


def only_thread_with(pid, policy):
    tids = [tid for tid, (pol, _, _) in worker_threads(pid).items() if pol == policy]
    assert len(tids) == 1, worker_threads(pid)  # the worker, and only the worker
    return tids[0]


def need_root():
    if os.geteuid() != 0:
        pytest.skip("real-time and deadline policies need root (CAP_SYS_NICE)")


@pytest.mark.parametrize(
    "spec, policy, nice, rtprio", [("other:5", "other", 5, 0), ("rr:10", "rr", 0, 10), ("fifo:1", "fifo", 0, 1)]
)
def test_policy_reaches_the_worker(start_node, run_client, spec, policy, nice, rtprio):
    if policy != "other":
        need_root()
    node = start_node("--sched", spec)
    threads = worker_threads(node.proc.pid)
    if policy == "other":
        assert sorted(n for _, n, _ in threads.values()).count(5) == 1, threads
    else:
        tid = only_thread_with(node.proc.pid, SCHED_POLICY[policy])
        assert threads[tid][2] == -1 - rtprio  # /proc shows real-time priority p as -1 - p
    assert run_client("--to", node.addr, "-C", "100us", "-n", 50)["ok"] == 50


def test_sched_deadline_applies_and_is_enforced(start_node, run_client):
    need_root()
    # 1 ms of CPU every 10 ms: 100 requests of 100 us CPU each (10 ms) cannot
    # finish in fewer than 9 periods, whatever the load on this machine.
    try:
        node = start_node("--sched", "deadline:1000,10000,10000")
    except AssertionError as refused:
        text = str(refused)
        if "Operation not permitted" in text or "Device or resource busy" in text:
            pytest.skip(f"the kernel refused SCHED_DEADLINE here (EPERM/EBUSY): {text.splitlines()[-1]}")
        raise
    tid = only_thread_with(node.proc.pid, SCHED_POLICY["deadline"])
    shown = subprocess.run(["chrt", "-p", str(tid)], capture_output=True, text=True, check=True).stdout
    assert "SCHED_DEADLINE" in shown
    assert "runtime/deadline/period parameters: 1000000/10000000/10000000" in shown
    res = run_client("--to", node.addr, "-C", "100us", "-n", 100)
    assert res["ok"] == 100
    assert res["duration_s"] >= 0.08, res.summary  # throttled by the kernel, so the budget is real


def test_deadline_with_pinning_is_refused_up_front(binaries):
    proc = subprocess.run(
        [str(binaries["node"]), "-b", "127.0.0.1:0", "--sched", "deadline:1000,10000,10000", "-c", "0"],
        capture_output=True,
        text=True,
        timeout=10,
        env=sanitizer_env(),
    )
    assert proc.returncode == 2
    assert "--sched deadline cannot be combined with -c" in proc.stderr


def test_refused_policy_stops_the_node(binaries, tmp_path):
    # taskset narrows the affinity behind the node's back: the kernel says
    # EPERM, and the node must exit rather than serve without its worker.
    need_root()
    if os.cpu_count() < 2:
        pytest.skip("pinning to CPU 0 narrows nothing on a one-CPU machine")
    cmd = [
        "taskset",
        "-c",
        "0",
        str(binaries["node"]),
        "-b",
        "127.0.0.1:0",
        "-s",
        str(tmp_path / "s"),
        "--sched",
        "deadline:1000,10000,10000",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=sanitizer_env())
    assert proc.returncode == 1, proc.stderr
    assert "worker 0: sched_setattr SCHED_DEADLINE 1000000/10000000/10000000 ns: Operation not permitted" in proc.stderr
    assert "listening on" not in proc.stderr


@pytest.mark.parametrize(
    "spec, message",
    [
        ("deadline:20,10,100", "expected 1us <= RUNTIME <= DEADLINE <= PERIOD"),
        ("deadline:20,100", "deadline needs RUNTIME,DEADLINE,PERIOD"),
        ("deadline:1,2,3,4", "deadline takes exactly RUNTIME,DEADLINE,PERIOD"),
        ("fifo:100", "'100' is not a whole number within 1..99"),
        ("other:x", "'x' is not a whole number within -20..19"),
        ("idle:1", "policy must be other, rr, fifo or deadline"),
        ("fifo", "expected other:NICE, rr:PRIO, fifo:PRIO or deadline:RUNTIME,DEADLINE,PERIOD"),
    ],
)
def test_bad_sched_specs(binaries, spec, message):
    proc = subprocess.run(
        [str(binaries["node"]), "--sched", spec], capture_output=True, text=True, timeout=10, env=sanitizer_env()
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
