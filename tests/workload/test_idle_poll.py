"""--idle-poll: one SCHED_IDLE spinner per CPU the process may use (each
pinned to its CPU), while the node and client work as before and still stop
cleanly on SIGTERM.  What it buys is measured by bench/workload_bench.py."""

import json
import os
import pathlib
import re
import subprocess
import time

import pytest
from wl_support import sanitizer_env

pytestmark = pytest.mark.timing  # spinner threads seen within a wait

SCHED_IDLE = 5


def spinners(pid):
    """{tid: the CPUs it may run on} of the process's SCHED_IDLE threads."""
    found = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        sched = (task / "sched").read_text()
        if int(re.search(r"^policy\s+:\s+(\d+)", sched, re.M).group(1)) == SCHED_IDLE:
            status = (task / "status").read_text()
            found[int(task.name)] = re.search(r"^Cpus_allowed_list:\s+(\S+)", status, re.M).group(1)
    return found


def test_the_node_runs_a_spinner_on_each_of_its_cpus_and_serves_as_before(start_node, run_client):
    node = start_node("--idle-poll")
    cpus = sorted(os.sched_getaffinity(0))
    deadline = time.monotonic() + 5
    while len(spinners(node.proc.pid)) < len(cpus) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(spinners(node.proc.pid).values()) == sorted(str(c) for c in cpus)
    result = run_client("--to", node.addr, "-C", "0", "-n", "300")
    assert (result["ok"], result["requests"]) == (300, 300)


def test_the_client_keeps_only_the_cpus_it_was_given_awake(binaries, start_node):
    node = start_node()
    cpu = sorted(os.sched_getaffinity(0))[0]
    client = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(cpu),
            str(binaries["client"]),
            "--idle-poll",
            "--to",
            node.addr,
            "-C",
            "0",
            "-n",
            "300",
            "-r",
            "100",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sanitizer_env(),
    )
    try:
        time.sleep(1.0)
        assert list(spinners(client.pid).values()) == [str(cpu)]
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert (summary["ok"], summary["requests"]) == (300, 300), out
