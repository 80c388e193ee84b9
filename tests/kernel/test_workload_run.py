"""The workload tools in a real local run on this host's kernel (bandwidth
only: no sch_netem here): wl-node and wl-client found by name in every
namespace, their traces collected in RUNDIR/workload/, each client's summary
printed at the end next to the network share of its chain, a large reply
paced by the path's rate, a target that leaves answered ERR/TIMEOUT without
a hang; and the run's verdict on commands that cannot start or fail on
their own.  The main run happens once per module (about 12 s of timeline)."""

from __future__ import annotations

import csv
import json
import subprocess
import time
import urllib.request

import pytest
from test_local_support import CLI, Cli, host_snapshot, read_json, run_id_of

from collapsar.manager.programs import workload_build_dir

GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)
BULK_REPLY_BYTES = 1 << 20  # `--rs 1m`
BULK_RATE_BPS = 10_000_000
DURATION_S = 12

# chain and bulk join at 1 s, once both nodes listen; doomed at 5 s, and
# its target db leaves at 7 s, in the middle of its 4 s of requests.
TOPOLOGY = """\
experiment: {name: workload-run}
services:
  front: {command: [wl-node]}
  db: {command: [wl-node]}
  chain: {command: [wl-client, --to, front, -C, 1ms, -F, db, -C, 1ms, -n, "20", -r, "10"], replicas: 0}
  bulk: {command: [wl-client, --to, front, --rs, 1m, -n, "3"], replicas: 0}
  doomed:
    command: [wl-client, --to, front, -F, "db,timeout=300ms", -C, 1ms, -n, "40", -r, "10", --timeout, 2s]
    replicas: 0
bridges: [sw]
links:
  - {from: chain, to: sw, bandwidth: 100Mbps}
  - {from: doomed, to: sw, bandwidth: 100Mbps}
  - {from: bulk, to: sw, bandwidth: 10Mbps}
  - {from: front, to: sw, bandwidth: 100Mbps}
  - {from: db, to: sw, bandwidth: 100Mbps}
events:
  - {at: 1s, service: chain, action: join}
  - {at: 1s, service: bulk, action: join}
  - {at: 5s, service: doomed, action: join}
  - {at: 7s, service: db, action: leave}
"""
INSTANCES = ("front", "db", "chain", "bulk", "doomed")
CLIENTS = ("chain", "bulk", "doomed")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (workload_build_dir() / "wl-client").exists():
        pytest.fail(f"wl-client is not built in {workload_build_dir()}: make -C workload-node")
    tmp = tmp_path_factory.mktemp("workload")
    (tmp / "chain.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "chain.yaml"),
        "--duration",
        f"{DURATION_S}s",
        "--subnet",
        "10.180.1.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--grace",
        "2s",
    )
    try:
        cli.wait_line("all 2 instances up", 120)
        up = time.monotonic()
        status = next((line for line in cli.lines if line.startswith("status: ")), None) or cli.wait_line("status: ")
        # while the run goes: chain's 20 requests are done (1-3 s), doomed's under way (5-9 s)
        time.sleep(max(0.0, 8.5 - (time.monotonic() - up)))
        with urllib.request.urlopen(status.split()[1].replace("/status", "/metrics"), timeout=5) as reply:
            metrics = reply.read().decode()
        code, lines, stderr = cli.finish(120)
        ended_s = time.monotonic() - up
    finally:
        cli.kill()
    run_dir = tmp / "runs" / run_id_of(lines)
    return {"code": code, "lines": lines, "stderr": stderr, "dir": run_dir, "ended_s": ended_s, "metrics": metrics}


def workload_line(run, instance: str) -> str:
    (line,) = [line for line in run["lines"] if line.startswith(f"workload {instance}: ")]
    return line


def summary_of(run, instance: str) -> dict:
    return read_json(run["dir"] / "workload" / f"{instance}.summary.json")


def test_the_run_ends_on_time_and_exits_0(run):
    assert run["code"] == 0, (run["stderr"], run["lines"])
    assert "stopping: duration reached" in run["lines"]
    # No hang on the target that left: the teardown follows the duration
    # (2 s of grace at most, and the namespaces' removal).
    assert run["ended_s"] < DURATION_S + 15, run["ended_s"]
    final = {i["name"]: (i["status"], i["failed"]) for i in read_json(run["dir"] / "instances.json")}
    assert final == {
        "front": ("up", False),
        "db": ("stopped", False),
        "chain": ("exited(0)", False),
        "bulk": ("exited(0)", False),
        "doomed": ("exited(0)", False),
    }


def test_every_instance_wrote_its_spans_and_each_client_its_records(run):
    files = {p.name for p in (run["dir"] / "workload").iterdir()}
    assert {f"{name}.spans.jsonl" for name in INSTANCES} <= files, files
    assert {f"{name}.{kind}" for name in CLIENTS for kind in ("requests.csv", "summary.json")} <= files, files
    for name in INSTANCES:
        assert (run["dir"] / "workload" / f"{name}.spans.jsonl").stat().st_size > 0, name


def test_each_clients_summary_line_counts_what_it_sent(run):
    chain = summary_of(run, "chain")
    assert (chain["instance"], chain["service"]) == ("chain", "chain")
    assert (chain["requests"], chain["ok"], chain["err"], chain["timeout"]) == (20, 20, 0, 0)
    assert workload_line(run, "chain").startswith("workload chain: 20 requests (ok 20, err 0, timeout 0); latency p50 ")
    report = {c["instance"]: c for c in read_json(run["dir"] / "workload.json")["clients"]}
    assert set(report) == set(CLIENTS)
    assert report["chain"]["summary"] == chain and report["chain"]["service"] == "chain"


def test_a_large_reply_takes_the_time_the_paths_rate_allows(run):
    bulk = summary_of(run, "bulk")
    assert (bulk["requests"], bulk["ok"]) == (3, 3)
    transfer_us = BULK_REPLY_BYTES * 8 / (BULK_RATE_BPS * GOODPUT_SHARE) * 1e6  # 0.89 s
    # htb lets a burst of a few kB through at once; a loaded 2-core host only adds time.
    assert 0.9 * transfer_us < bulk["latency_us"]["p50"] < 1.5 * transfer_us, (bulk, transfer_us)


def test_a_target_that_leaves_is_answered_err_or_timeout_and_counted(run):
    doomed = summary_of(run, "doomed")
    assert doomed["requests"] == 40 and doomed["unsent"] == 0
    # About 20 requests before db leaves at 7 s, about 20 after.
    assert doomed["ok"] >= 10 and doomed["err"] + doomed["timeout"] >= 10, doomed
    assert doomed["ok"] + doomed["err"] + doomed["timeout"] == 40
    line = workload_line(run, "doomed")
    assert f"(ok {doomed['ok']}, err {doomed['err']}, timeout {doomed['timeout']})" in line


def test_the_workload_series_places_each_second_of_requests_on_the_run_clock(run):
    with open(run["dir"] / "series" / "workload.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    by = {client: [r for r in rows if r["client"] == client] for client in CLIENTS}
    doomed = summary_of(run, "doomed")
    assert sum(int(r["sent"]) for r in by["doomed"]) == 40
    assert sum(int(r["ok"]) for r in by["doomed"]) == doomed["ok"]
    # It joins at 5 s and sends 10 a second for 4 s; db leaves at 7 s.
    assert {int(r["t_s"]) for r in by["doomed"]} <= set(range(6, 11)), by["doomed"]
    for r in by["doomed"]:
        if int(r["t_s"]) <= 7:  # sent before db left: answered
            assert int(r["ok"]) == int(r["sent"]) and float(r["p50_ms"]) < 50, r
        if int(r["t_s"]) >= 9:  # sent after: none answered
            assert int(r["ok"]) == 0 and r["p50_ms"] == "", r
    assert sum(int(r["sent"]) for r in by["chain"]) == sum(int(r["ok"]) for r in by["chain"]) == 20
    assert {int(r["t_s"]) for r in by["chain"]} <= {2, 3, 4}


def test_the_network_share_of_each_chain_is_printed_and_saved(run):
    """Needs wl-client's parse-only mode (`--check`); a bandwidth-only run's
    configured RTTs are all 0 ms."""
    probe = subprocess.run(
        [str(workload_build_dir() / "wl-client"), "--check", "-C", "1ms"], capture_output=True, text=True, timeout=10
    )
    assert probe.returncode == 0, f"this wl-client has no --check yet: {probe.stderr.strip()}"
    # db's leave at 7 s changes the paths front <-> db (chain had finished by then).
    assert workload_line(run, "chain").endswith(
        "; network share of the chain: 0 ms (configured RTTs: chain->front 0 ms, front->db 0 ms); "
        "later events change these paths at 7s"
    )
    assert workload_line(run, "bulk").endswith("; network share of the chain: 0 ms (configured RTTs: bulk->front 0 ms)")
    assert workload_line(run, "doomed").endswith(
        "; network share of the chain: 0 ms (configured RTTs: doomed->front 0 ms, front->db 0 ms); "
        "later events change these paths at 7s"
    )
    report = {c["instance"]: c for c in read_json(run["dir"] / "workload.json")["clients"]}
    chain = report["chain"]
    assert (chain["network_share_us"], chain["at_us"], chain["chain_problem"]) == (0, 1_000_000, None)
    assert chain["hops"] == [
        {"from": "chain", "to": ["front"], "rtt_us": [0], "nack": 1},
        {"from": "front", "to": ["db"], "rtt_us": [0], "nack": 1},
    ]
    assert chain["chain"]["to"] == "front" and [op["op"] for op in chain["chain"]["chain"]] == ["compute", "forward"]
    assert report["doomed"]["paths_change_at_us"] == [7_000_000]


# ---- bad input and failing commands -----------------------------------------------


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


MISSING = (
    "experiment: {name: missing}\nservices:\n  a: {command: [sleep, '5']}\n"
    "  b: {command: [no-such-program-w3a, --flag]}\n"
    "links:\n  - {from: a, to: b, bandwidth: 10Mbps}\n"
)


def test_a_missing_program_refuses_the_run_and_check_before_anything_is_made(tmp_path):
    topology = write(tmp_path, "missing.yaml", MISSING)
    before = host_snapshot()
    done = subprocess.run(
        [*CLI, "run", topology, "--run-dir", str(tmp_path / "runs"), "--subnet", "10.180.2.0/24"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"{topology}:4: service b: program 'no-such-program-w3a' is not on the instances' "
        f"PATH (this host's PATH, then {workload_build_dir()})\n"
    )
    assert not (tmp_path / "runs").exists()
    assert not {n for n in host_snapshot()["netns"] - before["netns"] if n.startswith("cx-")}
    check = subprocess.run([*CLI, "check", topology], capture_output=True, text=True, timeout=60)
    assert (check.returncode, check.stdout, check.stderr) == (2, "", done.stderr)


def test_commands_that_fail_on_their_own_fail_the_run_with_their_last_lines(tmp_path):
    # `broken` exists and is executable, but its interpreter does not: only
    # the exec itself can tell, once the run is up.
    broken = tmp_path / "broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    topology = write(
        tmp_path,
        "fails.yaml",
        (
            "experiment: {name: fails}\nservices:\n"
            "  flaky: {command: [sh, -c, \"echo connecting; echo 'db: connection refused' >&2; exit 1\"]}\n"
            f"  broken: {{command: [{broken}]}}\n"
            "  steady: {command: [sleep, '30']}\n"
            "links:\n  - {from: flaky, to: steady, bandwidth: 10Mbps}\n"
            "  - {from: broken, to: steady, bandwidth: 10Mbps}\n"
        ),
    )
    cli = Cli(
        "run",
        topology,
        "--run-dir",
        str(tmp_path / "runs"),
        "--duration",
        "3s",
        "--subnet",
        "10.180.3.0/24",
        "--grace",
        "1s",
    )
    try:
        code, lines, stderr = cli.finish(90)
    finally:
        cli.kill()
    assert code == 6, (stderr, lines)
    assert sorted(stderr.splitlines()) == sorted(
        [
            "collapsar: instance flaky: exited with status 1 on its own; the last lines of logs/flaky.err:",
            "collapsar:   flaky| db: connection refused",
            f'collapsar: instance broken: could not start: exec of "{broken}" failed: No such file or directory',
        ]
    )
    run_dir = tmp_path / "runs" / run_id_of(lines)
    final = {i["name"]: (i["exit_code"], i["failed"]) for i in read_json(run_dir / "instances.json")}
    assert final == {"flaky": (1, True), "broken": (1, True), "steady": (-15, False)}
    # The run went to its end and was torn down as usual.
    assert "stopping: duration reached" in lines and any(line.startswith("torn down: ") for line in lines)
    assert not {i["netns"] for i in read_json(run_dir / "plan.json")["instances"]} & host_snapshot()["netns"]
    assert json.loads((run_dir / "journal.jsonl").read_text().splitlines()[-1])["kind"] == "finished"


def test_metrics_show_each_clients_requests_and_latency_while_the_run_goes(run):
    samples = [line for line in run["metrics"].splitlines() if not line.startswith("#")]
    assert 'collapsar_workload_requests_total{client="chain",status="ok"} 20' in samples
    assert 'collapsar_workload_latency_seconds_count{client="chain"} 20' in samples
    # two 1 ms computes on its path: no OK request of chain under 2 ms, all under 50 ms
    assert 'collapsar_workload_latency_seconds_bucket{client="chain",le="0.002"} 0' in samples
    assert 'collapsar_workload_latency_seconds_bucket{client="chain",le="0.05"} 20' in samples
    doomed = [
        line for line in samples if line.startswith('collapsar_workload_requests_total{client="doomed",status="ok"}')
    ]
    assert len(doomed) == 1 and 0 < int(doomed[0].split()[-1]) < 40  # under way
