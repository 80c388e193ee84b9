"""The life cycle of local runs around the happy path: one run at a time,
the status API while a run is live, SIGTERM, SIGKILL and `collapsar
cleanup`, and inputs that must change nothing (bad files, a missing
sch_netem, --dry-run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from test_local_support import CLI, Cli, host_snapshot, pid_alive, read_json, run_id_of

LONG = """\
experiment: {name: local-long}
services:
  server: {command: [iperf3, -s]}
  client: {command: [sh, -c, "sleep 0.3; exec iperf3 -c server -t 60 -i 0"]}
  idle: {command: [sleep, "60"]}
bridges: [sw]
links:
  - {from: client, to: sw, bandwidth: 100Mbps}
  - {from: idle, to: sw, bandwidth: 100Mbps}
  - {from: sw, to: server, bandwidth: 10Mbps}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def get_json(port: int, route: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=5) as reply:
        body = reply.read().decode()
    return body if route == "/metrics" else json.loads(body)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0").split("\0")
    except FileNotFoundError:
        return []


def journal_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


@pytest.mark.timing  # the flow's measured rate under its class
def test_second_run_fails_status_api_serves_and_sigterm_tears_down(tmp_path):
    topology = write(tmp_path, "long.yaml", LONG)
    first = Cli("run", topology, "--run-dir", str(tmp_path / "runs"), "--grace", "1s")
    try:
        port = int(first.wait_line("status: http://127.0.0.1:").split(":")[3].split("/")[0])
        run_id = run_id_of(first.lines)
        second = subprocess.run([*CLI, "run", topology], capture_output=True, text=True, timeout=60)
        assert second.returncode == 5
        assert second.stderr.startswith(
            f"collapsar: another collapsar run is active: run {run_id} (manager pid {first.proc.pid}, "
        )
        busy = subprocess.run([*CLI, "cleanup", run_id], capture_output=True, text=True, timeout=60)
        assert busy.returncode == 1
        assert f"run {run_id} is still active (manager pid {first.proc.pid})" in busy.stderr
        time.sleep(3)  # let the iperf3 flow settle under its 10 Mbit/s class
        status = get_json(port, "/status")
        assert {i["name"]: i["status"] for i in status["instances"]} == {"server": "up", "client": "up", "idle": "up"}
        paths = {(p["src"], p["dst"]): p for p in get_json(port, "/paths")}
        assert paths[("client", "server")]["rate_bps"] == 10_000_000
        assert paths[("server", "client")]["rate_bps"] == 10_000_000
        assert paths[("client", "idle")]["rate_bps"] == 100_000_000
        flows = {(f["src"], f["dst"]): f for f in status["throughput"]}
        # Measured at the client's egress (wire bytes, before the shaper) over
        # one 50 ms period: TCP offers about what the class lets through.
        assert 7e6 < flows[("client", "server")]["rate_bps"] < 12e6, flows
        metrics = get_json(port, "/metrics")
        assert 'collapsar_instance_up{instance="client",status="up"} 1' in metrics
        assert "collapsar_events_pending 0" in metrics
        # The flow as Prometheus sees it: its path's rate, and a measured rate near it
        samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
        pair = '{src="client",dst="server"}'
        assert samples[f"collapsar_flow_configured_bits_per_second{pair}"] == "10000000"
        assert samples[f"collapsar_flow_cut{pair}"] == "0"
        assert 7e6 < float(samples[f"collapsar_flow_rate_bits_per_second{pair}"]) < 12e6
        assert float(samples[f"collapsar_flow_share_bits_per_second{pair}"]) == 10_000_000  # alone on its path
        first.proc.send_signal(signal.SIGTERM)
        code, lines, stderr = first.finish(60)
    finally:
        first.kill()
    assert code == 0, stderr
    assert "stopping: SIGTERM" in lines
    run_dir = tmp_path / "runs" / run_id
    plan = read_json(run_dir / "plan.json")
    now = host_snapshot()
    assert not {i["netns"] for i in plan["instances"]} & now["netns"]
    assert plan["bridge"] not in now["links"]
    assert not any(pid_alive(r["pid"]) for r in journal_of(run_dir) if r["kind"] == "process")


def test_cleanup_after_sigkill_removes_that_runs_leftovers_only(tmp_path):
    bystander = f"cxkeep{os.getpid()}"
    subprocess.run(["ip", "netns", "add", bystander], check=True)
    other = subprocess.Popen(["ip", "netns", "exec", bystander, "sleep", "60"])
    run = None
    try:
        topology = write(
            tmp_path,
            "two.yaml",
            "experiment: {name: two}\nservices:\n"
            "  a: {command: [sleep, '60']}\n  b: {command: [sleep, '60']}\n"
            "links:\n  - {from: a, to: b, bandwidth: 10Mbps}\n",
        )
        run = Cli("run", topology, "--run-dir", str(tmp_path / "runs"))
        run.wait_line("all 2 instances up")
        run_id = run_id_of(run.lines)
        run_dir = tmp_path / "runs" / run_id
        started = [r["pid"] for r in journal_of(run_dir) if r["kind"] == "process"]
        deadline = time.monotonic() + 5.0  # until both are `sleep` itself, past ip's set-up
        while not all(_cmdline(pid) == ["sleep", "60"] for pid in started) and time.monotonic() < deadline:
            time.sleep(0.01)
        run.proc.kill()
        run.proc.wait()
        plan = read_json(run_dir / "plan.json")
        made_ns = {i["netns"] for i in plan["instances"]}
        pids = [r["pid"] for r in journal_of(run_dir) if r["kind"] == "process"]
        assert made_ns <= host_snapshot()["netns"] and len(pids) == 2
        # The commands die with their manager (parent-death signal), at once.
        deadline = time.monotonic() + 2.0
        while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(pid_alive(pid) for pid in pids)

        cleanup = subprocess.run([*CLI, "cleanup", run_id], capture_output=True, text=True)
        assert cleanup.returncode == 0, cleanup.stderr
        assert f"{run_id}: deleted link {plan['bridge']}" in cleanup.stdout
        for ns in made_ns:
            assert f"{run_id}: deleted netns {ns}" in cleanup.stdout
        assert f"{run_id}: clean (" in cleanup.stdout
        now = host_snapshot()
        assert not made_ns & now["netns"] and not made_ns & now["etc_netns"]
        assert plan["bridge"] not in now["links"]
        assert not any(pid_alive(pid) for pid in pids)
        assert bystander in now["netns"] and pid_alive(other.pid)
        assert journal_of(run_dir)[-1]["kind"] == "cleaned"
        again = subprocess.run([*CLI, "cleanup", str(run_dir)], capture_output=True, text=True)
        assert again.returncode == 0 and f"{run_id}: clean (0 leftovers removed)" in again.stdout
        unknown = subprocess.run([*CLI, "cleanup", run_id], capture_output=True, text=True)
        assert unknown.returncode == 1 and f"cleanup {run_id}: no such run" in unknown.stderr
    finally:
        if run is not None:
            run.kill()  # a failed assertion above must not leave the run behind
        other.kill()
        other.wait()
        subprocess.run(["ip", "netns", "del", bystander], check=False)


TERM_TRAP = "trap 'echo got TERM; exit 7' TERM; echo trapping; while :; do sleep 0.05; done"


def test_sighup_tears_down_and_joined_commands_get_their_grace(tmp_path):
    """SIGHUP (a closed terminal) ends a run like SIGTERM.  A command that
    joined through the timeline still gets SIGTERM and its grace at the end:
    it is not killed when the timeline's thread ends (its parent-death signal
    follows the thread that forked it, see local/supervisor.py)."""
    topology = write(
        tmp_path,
        "hup.yaml",
        "experiment: {name: hup}\nservices:\n"
        f'  a: {{command: [sh, -c, "{TERM_TRAP}"]}}\n'
        f'  b: {{command: [sh, -c, "{TERM_TRAP}"], replicas: 0}}\n'
        "links:\n  - {from: a, to: b, bandwidth: 10Mbps}\n"
        "events:\n  - {at: 200ms, service: b, action: join}\n",
    )
    run = Cli("run", topology, "--run-dir", str(tmp_path / "runs"), "--grace", "3s")
    try:
        run.wait_line("all 1 instances up")
        run_dir = tmp_path / "runs" / run_id_of(run.lines)
        # Both shells have set their trap (a SIGHUP before b's would kill it:
        # CI's loaded host saw b exit -15, started but not yet trapping).
        logs = [run_dir / "logs" / f"{name}.out" for name in ("a", "b")]
        deadline = time.monotonic() + 10
        while not all(log.is_file() and "trapping" in log.read_text() for log in logs):
            assert time.monotonic() < deadline, "the commands did not set their traps in 10 s"
            time.sleep(0.05)
        run.proc.send_signal(signal.SIGHUP)
        code, lines, stderr = run.finish(30)
    finally:
        run.kill()
    assert code == 0, stderr
    assert "stopping: SIGHUP" in lines
    exits = {i["name"]: i["exit_code"] for i in read_json(run_dir / "instances.json")}
    assert exits == {"a": 7, "b": 7}  # each ran its TERM trap: stopped, not killed
    assert (run_dir / "logs").is_dir()
    assert not {i["netns"] for i in read_json(run_dir / "plan.json")["instances"]} & host_snapshot()["netns"]


@pytest.mark.parametrize(
    "text, code, message",
    [
        (
            "experiment: {name: bad}\nservices:\n  a: {command: [sleep, '1']}\n"
            "links:\n  - {from: a, to: nowhere, bandwidth: 10Mbps}\n",
            2,
            "bad.yaml:5: ",
        ),
        (
            "experiment: {name: bad}\nservices:\n  a: {command: [sleep, '1']}\n  b: {command: [sleep, '1']}\n"
            "links:\n  - {from: a, to: b, latency: 10ms}\n",
            3,
            "sch_netem",
        ),
    ],
)
def test_bad_input_changes_nothing(tmp_path, text, code, message):
    topology = write(tmp_path, "bad.yaml", text)
    before = host_snapshot()
    result = subprocess.run(
        [*CLI, "run", topology, "--run-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == code, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists()
    after = host_snapshot()
    assert not {n for n in after["netns"] - before["netns"] if n.startswith("cx-")}


def test_missing_netem_names_both_fixes(tmp_path):
    topology = write(
        tmp_path,
        "delay.yaml",
        "experiment: {name: d}\nservices:\n"
        "  a: {command: [sleep, '1']}\n  b: {command: [sleep, '1']}\n"
        "links:\n  - {from: a, to: b, latency: 10ms}\n",
    )
    result = subprocess.run([*CLI, "run", topology], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    (line,) = result.stderr.strip().splitlines()
    assert "sch_netem" in line and "--vm" in line and "modules" in line


def test_dry_run_prints_the_plan_and_creates_nothing(tmp_path):
    topology = write(tmp_path, "dry.yaml", LONG)
    result = subprocess.run(
        [*CLI, "run", "--dry-run", topology, "--run-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith(
        "3 instances on bridge cx000000br, subnet 10.77.0.0/16, "
        "leaves: pfifo (no delay/jitter/loss), 0 timeline steps after t=0"
    )
    at = lines.index(
        "instance client: 10.77.0.3/16 on cx-000000-client/eth0, starts at t=0: "
        "sh -c sleep 0.3; exec iperf3 -c server -t 60 -i 0"
    )
    assert lines[at + 1].strip().startswith("qdisc 1: root htb default 1:1")
    classes = [line.strip() for line in lines[at + 1 : at + 12] if line.strip().startswith("class 1:1")]
    assert classes[1].startswith("class 1:10 -> 10.77.0.2: rate=ceil 10Mbps")  # to the server
    assert classes[2].startswith("class 1:11 -> 10.77.0.4: rate=ceil 100Mbps")  # to idle
    assert not (tmp_path / "runs").exists()
    assert not any(name.startswith("cx-000000-") for name in host_snapshot()["netns"])
