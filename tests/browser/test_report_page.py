"""`collapsar report` of a real local run (iperf3 through a bottleneck whose
rate an event changes, a wl-client chain through two wl-nodes, the in-run
probe), opened from a file in Debian's Chromium: every plot is drawn, the
graph has every node and link, and the page makes no request at all: not
even the one its own script would make (the Content-Security-Policy stops
it before it leaves)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from test_local_support import CLI, Cli, run_id_of

TOPOLOGY = """\
experiment: {name: report-browser}   # </script><script>alert("from the file")</script>
services:
  front: {command: [wl-node]}
  db: {command: [wl-node]}
  chain: {command: [sh, -c, "sleep 0.5; exec wl-client --to front -C 1ms -F db -C 1ms -n 30 -r 10"]}
  load: {command: [sh, -c, "sleep 0.3; iperf3 --client sink --time 4"]}
  sink: {command: [iperf3, --server, --one-off]}
bridges: [sw, core]
links:
  - {from: chain, to: sw, bandwidth: 100Mbps}
  - {from: load, to: sw, bandwidth: 100Mbps}
  - {from: sw, to: core, bandwidth: 20Mbps}
  - {from: front, to: core, bandwidth: 100Mbps}
  - {from: db, to: core, bandwidth: 100Mbps}
  - {from: sink, to: core, bandwidth: 100Mbps}
events:
  - {at: 2s, link: [sw, core], set: {bandwidth: 10Mbps}}
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "report.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "report.yaml"),
        "--duration",
        "5s",
        "--probe-every",
        "250ms",
        "--subnet",
        "10.82.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--status-port",
        "-1",
    )
    try:
        code, lines, err = cli.finish(90)
    finally:
        cli.kill()
    assert code == 0, (lines, err)
    run_dir = tmp / "runs" / run_id_of(lines)
    argv = [*CLI, "report", str(run_dir), "-o", str(tmp / "report.html")]
    made = subprocess.run(argv, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"report: {tmp / 'report.html'} (")
    figures = json.loads(
        subprocess.run([*CLI, "report", str(run_dir), "--json"], capture_output=True, text=True, check=True).stdout
    )
    return {"html": tmp / "report.html", "figures": figures, "run_dir": run_dir}


def drawn_charts(page) -> list[tuple[str, int, int]]:
    """Per chart: its id, its canvas's width and how many of its pixels are
    of a series' colour (saturated: axes, grid, text and the event marks
    are grey or black, so a chart without its data has none).  Any series
    counts: where lines coincide (an RTT's median on its configured value)
    the one drawn last covers the others."""
    return page.evaluate(
        """() => window.collapsarReport.charts.map(({ id, box }) => {
            const canvas = box.querySelector("canvas");
            const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
            let count = 0;
            for (let i = 0; i < pixels.length; i += 4) {
              const [r, g, b, a] = [pixels[i], pixels[i + 1], pixels[i + 2], pixels[i + 3]];
              if (a > 200 && Math.max(r, g, b) - Math.min(r, g, b) > 60) count += 1;
            }
            return [id, canvas.width, count];
        })"""
    )


def open_offline(browser, path):
    """A page of the report file, with every request and problem recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.requests, page.problems = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("console", lambda message: page.problems.append(f"console: {message.text}"))
    page.on("dialog", lambda dialog: (page.problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.goto(path.as_uri())
    return context, page


def expected_charts(figures: dict) -> list[str]:
    """The charts report.js draws for these figures, in its order."""
    ids = [f"flow-{i}" for i in range(len(figures["flows"]["series"]))]
    ids += ["link-utilisation"] if figures["links"]["series"] else []
    ids += [f"rtt-{i}" for i in range(len(figures["rtt"]["series"]))]
    lossy = [s for s in figures["rtt"]["series"] + figures["flows"]["series"] if any(v and v > 0 for v in s["loss"])]
    ids += ["loss"] if lossy else []
    ids += ["event-lateness"] if figures["events"] else []
    clients = figures["workload"]["clients"]
    ids += ["latency-cdf"] if any(c["cdf"]["latency_ms"] for c in clients) else []
    ids += [f"latency-{i}" for i, c in enumerate(clients) if c["per_second"]["t"]]
    return ids


def test_the_figures_of_the_run(report):
    figures = report["figures"]
    as_run = (report["run_dir"] / "experiment.yaml").read_bytes()
    assert figures["experiment"]["sha256"] == hashlib.sha256(as_run).hexdigest()
    assert figures["provenance"]["host"]["kernel"] == os.uname().release
    host_default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    assert figures["provenance"]["host"]["tcp_congestion_control"] == host_default
    load = next(f for f in figures["flows"]["series"] if (f["src"], f["dst"]) == ("load", "sink"))
    # the bottleneck's rate in force: 20 Mbit/s, then 10 from the event at 2 s on
    assert load["configured"][0] == 20_000_000 and load["configured"][-1] == 10_000_000
    assert [e["label"] for e in figures["events"]] == ["link sw -- core set"]
    (chain,) = figures["workload"]["clients"]
    assert (chain["client"], chain["requests"], chain["ok"]) == ("chain", 30, 30)
    assert chain["p50_ms"] > 2.0  # two 1 ms computes on its path
    assert figures["rtt"]["total"] > 0 and figures["workload"]["breakdown_text"]


def test_every_plot_is_drawn_and_no_request_leaves_the_page(report, browser, shots):
    context, page = open_offline(browser, report["html"])
    requests, problems, url = page.requests, page.problems, report["html"].as_uri()
    try:
        assert page.evaluate("window.collapsarReport && window.collapsarReport.ready") is True
        figures = report["figures"]
        ids = page.evaluate("window.collapsarReport.charts.map((c) => c.id)")
        assert ids == expected_charts(figures)
        assert len(ids) >= 6
        drawn = drawn_charts(page)
        for chart_id, width, count in drawn:
            assert width > 300 and count > 40, (chart_id, width, count)
        topology = figures["topology"]
        assert page.evaluate("window.collapsarReport.cy.nodes().length") == len(topology["nodes"]) == 7
        assert page.evaluate("window.collapsarReport.cy.edges().length") == len(topology["links"]) == 6
        assert figures["experiment"]["sha256"] in page.inner_text("#about")
        host_default = figures["provenance"]["host"]["tcp_congestion_control"]
        about = page.inner_text("#about")
        assert (
            "host's TCP congestion control" in about and host_default in about.split("host's TCP congestion control")[1]
        )
        assert '</script><script>alert("from the file")</script>' in page.text_content("pre.source")
        page.screenshot(path=str(shots / "report.png"), full_page=True)
        assert problems == []
        assert requests == [url]
        # The policy holds: a request the page itself tries never leaves it.
        refused = page.evaluate("fetch('http://127.0.0.1:9/').then(() => 'sent', (e) => 'refused: ' + e.name)")
        assert refused == "refused: TypeError"
        assert requests == [url]
        assert any("Content Security Policy" in p for p in problems), problems
    finally:
        context.close()


SET = """\
experiment: {name: report-set}
services:
  front: {command: [wl-node]}
  chain: {command: [sh, -c, "sleep 0.5; exec wl-client --to front -C 1ms -n 10 -r 10"]}
  load: {command: [sh, -c, "sleep 0.3; iperf3 --client sink --time 2"]}
  sink: {command: [iperf3, --server, --one-off]}
bridges: [sw]
links:
  - {from: chain, to: sw, bandwidth: 100Mbps}
  - {from: load, to: sw, bandwidth: 100Mbps}
  - {from: sw, to: front, bandwidth: 100Mbps}
  - {from: sw, to: sink, bandwidth: 20Mbps}
"""


def test_the_report_of_a_set_draws_each_value_with_its_spread(browser, shots, tmp_path):
    (tmp_path / "set.yaml").write_text(SET)
    argv = ["--repeat", "2", "--sweep", "links[sw,sink].bandwidth=5Mbps,10Mbps", "--duration", "3s"]
    cli = Cli("run", str(tmp_path / "set.yaml"), *argv, "--subnet", "10.84.0.0/24", "--run-dir", str(tmp_path))
    try:
        code, lines, err = cli.finish(180)
    finally:
        cli.kill()
    assert code == 0, err
    set_dir = tmp_path / lines[0].split()[1].rstrip(":")
    made = subprocess.run([*CLI, "report", str(set_dir)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    context, page = open_offline(browser, set_dir / "report.html")
    try:
        assert page.evaluate("window.collapsarReport.ready") is True
        ids = page.evaluate("window.collapsarReport.charts.map((c) => c.id)")
        # against the swept value: the flow, the client's p50 and p99; per value: the flow and the client's CDFs
        assert ids == [
            "sweep-flow-0",
            "sweep-p50_ms-0",
            "sweep-p99_ms-0",
            "v0-flow-0",
            "v0-cdf-0",
            "v1-flow-0",
            "v1-cdf-0",
        ]
        drawn = drawn_charts(page)
        for chart_id, width, count in drawn:
            assert width > 300 and count > 40, (chart_id, width, count)
        page.screenshot(path=str(shots / "report-set.png"), full_page=True)
        assert page.problems == [] and page.requests == [(set_dir / "report.html").as_uri()]
    finally:
        context.close()
