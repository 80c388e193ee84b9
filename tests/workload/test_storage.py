"""LOAD/STORE on the storage thread: sync policies (with fsync observed both
by the node's counter and by strace), O_DIRECT, and offset wrap-around."""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest
from wl_support import LISTEN_RE, sanitizer_env

pytestmark = pytest.mark.timing  # sync against nosync store times


def test_sync_is_slower_than_nosync_and_fsyncs_each_store(start_node, run_client):
    node = start_node()
    nosync = run_client("--to", node.addr, "-S", "64k,nosync", "-n", 200)
    assert node.stats()["fsyncs"] == 0
    sync = run_client("--to", node.addr, "-S", "64k,sync", "-n", 200)
    assert (nosync["ok"], sync["ok"]) == (200, 200)
    assert node.stats()["fsyncs"] == 200
    assert sync.lat["p50"] > 1.5 * nosync.lat["p50"]
    assert sync.lat["mean"] > nosync.lat["mean"] + 20


def test_psync_flushes_periodically(start_node, run_client):
    node = start_node("--sync", "20ms")
    res = run_client("--to", node.addr, "-S", "4k,psync", "-r", 400, "-n", 400)
    assert res["ok"] == 400
    time.sleep(0.1)
    fsyncs = node.stats()["fsyncs"]
    assert 10 <= fsyncs <= 80  # about one per 20 ms over a 1 s run, far fewer than stores


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (deps/apt-workload.txt)")
def test_strace_sees_one_fsync_per_sync_store(binaries, run_client, tmp_path):
    log, trace = tmp_path / "node.log", tmp_path / "strace.txt"
    cmd = [
        "strace",
        "-f",
        "-qq",
        "-e",
        "trace=fsync",
        "-o",
        str(trace),
        str(binaries["node"]),
        "-b",
        "127.0.0.1:0",
        "-s",
        str(tmp_path / "data"),
    ]
    env = sanitizer_env()
    env["ASAN_OPTIONS"] += ":detect_leaks=0"  # LeakSanitizer cannot run under ptrace
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, env=env)
    try:
        port = None
        for _ in range(500):
            found = LISTEN_RE.findall(log.read_text())
            if found:
                port = found[0][2]
                break
            time.sleep(0.02)
        assert port, log.read_text()
        run_client("--to", f"127.0.0.1:{port}", "-S", "4k,sync", "-n", 37)
        run_client("--to", f"127.0.0.1:{port}", "-S", "4k,nosync", "-n", 20)
    finally:
        # Signal the traced node itself (strace's child); strace exits after it.
        children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        for pid in children:
            os.kill(int(pid), signal.SIGTERM)
        proc.wait(timeout=20)
    calls = [ln for ln in trace.read_text().splitlines() if re.search(r"\bfsync\(", ln)]
    assert len(calls) == 37
    assert proc.returncode == 0, log.read_text()


def test_odirect_handles_unaligned_offsets_and_sizes(start_node, run_client, tmp_path):
    node = start_node("--odirect")
    res = run_client(
        "--to", node.addr, "--store-offset", "123", "-S", "1000,sync", "--load-offset", "5000", "-L", "777", "-n", 20
    )
    assert res["ok"] == 20
    stats = node.stats()
    assert stats["storage_errors"] == 0 and stats["stores"] == 20 and stats["loads"] == 20


def test_offsets_wrap_at_the_maximum_file_size(start_node, run_client, tmp_path):
    node = start_node("-m", "1m")
    res = run_client("--to", node.addr, "--store-offset", "unif:min=0,max=32g", "-S", "10k", "-n", 300)
    assert res["ok"] == 300
    size = os.stat(tmp_path / "node0.storage").st_size
    assert 900 * 1024 <= size <= 1024 * 1024


def test_sequential_offsets(start_node, run_client, tmp_path):
    node = start_node()
    run_client("--to", node.addr, "--store-offset", "aseq:min=0,max=96k,step=32k", "-S", "32k", "-n", 4)
    assert os.stat(tmp_path / "node0.storage").st_size == 128 * 1024
