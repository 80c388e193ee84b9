"""The workload chain across containers (Compose) with its traces collected:
front and db run wl-node, client runs a wl-client chain through front to db
once it joins; every instance writes its spans, and the client its summary,
into the directory the generated file binds beside itself, where they are
on the host after the deployment is gone, and `collapsar trace` reads them
there.  The instance names come from
the manager's block in each container's /etc/hosts (Compose replicas are
identical containers)."""

from __future__ import annotations

import json

import yaml
from dockerlib import collapsar, collapsar_processes, docker, labelled_containers, log, run, wait_for

PROJECT = "cxworkload"
# Rate-only (this kernel has no sch_netem).  client joins at 2 s, once the
# nodes listen; its 20 requests at 10/s take 2 s.
TOPOLOGY = """\
experiment: {name: dockerworkload}
services:
  front: {command: [wl-node]}
  db: {command: [wl-node]}
  client: {command: [wl-client, --to, front, -C, 1ms, -F, db, -C, 1ms, -n, "20", -r, "10"], replicas: 0}
bridges: [sw]
links:
  - {from: client, to: sw, bandwidth: 50Mbps}
  - {from: front, to: sw, bandwidth: 50Mbps}
  - {from: db, to: sw, bandwidth: 50Mbps}
events:
  - {at: 2s, service: client, action: join}
"""


def test_a_chain_across_containers_leaves_its_traces_on_the_host(tmp_path, images):
    (tmp_path / "chain.yaml").write_text(TOPOLOGY)
    compose = tmp_path / "chain-compose.yml"
    done = collapsar("generate", str(tmp_path / "chain.yaml"), "--compose", "-o", str(compose))
    assert (done.returncode, done.stderr) == (0, "")
    experiment = yaml.safe_load(compose.read_text())["networks"]["collapsar"]["labels"]["org.collapsar.experiment"]
    traces = tmp_path / f"{experiment}.workload"
    base = ("docker-compose", "-p", PROJECT, "-f", str(compose))
    assert not collapsar_processes(), "a Collapsar manager is already running on this host"
    run(*base, "up", "-d")
    try:
        summary_file = traces / "client.summary.json"
        wait_for("the client's summary on the host", lambda: summary_file.exists() and summary_file.stat().st_size, 120)
        # Written once the client has its replies: complete when it exists.
        summary = json.loads(summary_file.read_text())
        log(f"compose workload: client summary {summary}")
        assert (summary["instance"], summary["service"]) == ("client", "client")
        assert (summary["requests"], summary["ok"], summary["err"], summary["timeout"]) == (20, 20, 0, 0)
        # Each request computes 1 ms on front and on db: at least 2 ms end to end.
        assert summary["latency_us"]["p50"] >= 2000, summary
    finally:
        run(*base, "down", "-t", "10")
        wait_for("every container of the experiment removed", lambda: not labelled_containers(experiment), 90)
        wait_for("no Collapsar process left", lambda: not collapsar_processes(), 30)
    # The nodes flush their spans as they stop: all there once the deployment is down.
    files = {path.name for path in traces.iterdir()}
    assert {
        "front.spans.jsonl",
        "db.spans.jsonl",
        "client.spans.jsonl",
        "client.requests.csv",
        "client.summary.json",
    } <= files, files
    for name in ("front", "db", "client"):
        assert (traces / f"{name}.spans.jsonl").stat().st_size > 0, name
    assert not docker("network", "ls", "-q", "--filter", f"label=org.collapsar.experiment={experiment}").split()
    # The collected files are what `collapsar trace` reads: every request, and
    # its path client -> front -> db with a compute on each node.
    done = collapsar("trace", str(traces), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(c["instance"], c["count"], c["by_status"]["ok"]) for c in report["clients"]] == [("client", 20, 20)]
    hops = {(b["from"], b["to"]) for b in report["breakdown"] if b["kind"] == "network"}
    assert hops == {("client", "front"), ("front", "db")}, report["breakdown"]
    computes = {b["instance"]: b["median_ms"] for b in report["breakdown"] if b["kind"] == "compute"}
    assert computes.keys() == {"front", "db"} and all(0.95 <= ms <= 1.5 for ms in computes.values()), computes
