"""Shared helpers of the workload tests (kept out of conftest.py so that test
modules import them by a unique name)."""

import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workload-node"
BUILD = WORKLOAD / "build" / "asan"
SANITIZER_ENV = {
    "ASAN_OPTIONS": "abort_on_error=0:exitcode=99:detect_leaks=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=99",
}
LISTEN_RE = re.compile(r"listening on (tcp|udp)://([0-9.]+):(\d+)")
STATS_RE = re.compile(r"wl-node: (stats|final) (.*)")


def sanitizer_env():
    env = dict(os.environ)
    env.update(SANITIZER_ENV)
    return env


def read_records(path):
    """Per-request CSV records written by wl-client -o."""
    rows = pathlib.Path(path).read_text().splitlines()
    header = rows[0].split(",")
    out = []
    for row in rows[1:]:
        rec = dict(zip(header, row.split(",")))
        rec["send_us"] = float(rec["send_us"])
        rec["latency_us"] = float(rec["latency_us"])
        out.append(rec)
    return out


def trace_json(run_dir):
    """`collapsar trace RUN_DIR --json`, run as a user runs it; its object."""
    done = subprocess.run(
        [sys.executable, "-m", "collapsar.cli", "trace", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
