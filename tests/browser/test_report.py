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
SERIES_BLUE = (37, 99, 235)  # the first series of every chart (report.js COLORS[0])


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
    load = next(f for f in figures["flows"]["series"] if (f["src"], f["dst"]) == ("load", "sink"))
    # the bottleneck's rate in force: 20 Mbit/s, then 10 from the event at 2 s on
    assert load["configured"][0] == 20_000_000 and load["configured"][-1] == 10_000_000
    assert [e["label"] for e in figures["events"]] == ["link sw -- core set"]
    (chain,) = figures["workload"]["clients"]
    assert (chain["client"], chain["requests"], chain["ok"]) == ("chain", 30, 30)
    assert chain["p50_ms"] > 2.0  # two 1 ms computes on its path
    assert figures["rtt"]["total"] > 0 and figures["workload"]["breakdown_text"]


def test_every_plot_is_drawn_and_no_request_leaves_the_page(report, browser, shots):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    requests, problems = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: problems.append(f"console: {message.text}"))
    page.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    try:
        url = report["html"].as_uri()
        page.goto(url)
        assert page.evaluate("window.collapsarReport && window.collapsarReport.ready") is True
        figures = report["figures"]
        ids = page.evaluate("window.collapsarReport.charts.map((c) => c.id)")
        assert ids == expected_charts(figures)
        assert len(ids) >= 6
        # every chart's canvas shows its first series: pixels of its colour
        drawn = page.evaluate(
            """([r, g, b]) => window.collapsarReport.charts.map(({ id, box }) => {
                const canvas = box.querySelector("canvas");
                const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
                let count = 0;
                for (let i = 0; i < pixels.length; i += 4) {
                  if (Math.abs(pixels[i] - r) < 40 && Math.abs(pixels[i + 1] - g) < 40
                      && Math.abs(pixels[i + 2] - b) < 40 && pixels[i + 3] > 200) count += 1;
                }
                return [id, canvas.width, count];
            })""",
            list(SERIES_BLUE),
        )
        for chart_id, width, count in drawn:
            assert width > 300 and count > 40, (chart_id, width, count)
        topology = figures["topology"]
        assert page.evaluate("window.collapsarReport.cy.nodes().length") == len(topology["nodes"]) == 7
        assert page.evaluate("window.collapsarReport.cy.edges().length") == len(topology["links"]) == 6
        assert figures["experiment"]["sha256"] in page.inner_text("#about")
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
