"""The dashboard when a run ends on its own (issue 19): a real `collapsar run
--dashboard --wait-start` whose two commands exit after a 2 s transfer, its
page and an aggregator's (`collapsar dashboard --manager URL`) open all
along.  Both say the run ended, when and why, keep the final flows and
instances on screen, name the report, and neither raises the "status stream
lost" alarm nor tries the stream again.  About 15 s."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from playwright.sync_api import expect
from test_local_support import Cli, run_id_of

TOPOLOGY = """\
experiment: {name: ending}
services:
  server: {command: [iperf3, -s, -1, -p, "5201"]}
  client: {command: [sh, -c, "sleep 0.3; iperf3 -c server -p 5201 -t 2"]}
bridges: [sw]
links:
  - {from: client, to: sw, bandwidth: 20Mbps}
  - {from: sw, to: server, bandwidth: 1Gbps}
"""
RETRY_WAIT_S = 4.0  # Chromium's EventSource tries again after 3 s


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ending")
    (tmp / "ending.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "ending.yaml"),
        "--wait-start",
        "--dashboard",
        "--subnet",
        "10.82.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--grace",
        "1s",
    )
    dash = None
    try:
        url = cli.wait_line("dashboard: ", 60).split()[1]
        base = url.rsplit("/dashboard/", 1)[0]
        dash = Cli("dashboard", "--manager", base + "/status", "--port", "0")
        run_dir = tmp / "runs" / run_id_of(cli.lines)
        yield {
            "cli": cli,
            "url": url,
            "base": base,
            "dir": run_dir,
            "token": (run_dir / "control-token").read_text().strip(),
            "dashboard": dash.wait_line("dashboard: ", 30).split()[1],
        }
    finally:
        if dash is not None and dash.proc.poll() is None:
            dash.proc.terminate()
            dash.proc.wait(10)
        cli.kill()


def open_page(browser, url):
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    page = context.new_page()
    page.problems = []
    page.streams = []  # every request for /stream: one, if nothing tries again
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("request", lambda request: "/stream" in request.url and page.streams.append(time.monotonic()))
    page.goto(url)
    deadline = time.monotonic() + 10
    while not page.evaluate("window.collapsarDashboard && window.collapsarDashboard.renders > 0"):
        assert time.monotonic() < deadline, f"{url} never rendered"
        time.sleep(0.05)
    return context, page


def text(page, selector):
    return page.locator(selector).text_content()


def flow_rows(page):
    return page.evaluate(
        "[...document.querySelectorAll('#flows tbody tr')].map(r => [...r.children].map(c => c.textContent))"
    )


def test_the_page_says_the_run_ended_and_keeps_its_final_state(run, browser, shots):
    own_context, own = open_page(browser, run["url"])
    agg_context, agg = open_page(browser, run["dashboard"])
    try:
        assert text(own, "#state") == "waiting"
        request = urllib.request.Request(
            run["base"] + "/control/start",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"Bearer {run['token']}"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert json.loads(reply.read())["ok"] is True
        started = time.monotonic()
        code, lines, stderr = run["cli"].finish(30)
        assert code == 0, stderr
        assert "stopping: every command has exited" in lines
        print(f"the run ended {time.monotonic() - started:.1f} s after its start")

        expect(own.locator("#state")).to_have_text("ended", timeout=5000)
        banner = text(own, "#banner")
        run_dir = str(run["dir"])
        assert banner.startswith("Run ended at ") and "(t = " in banner
        assert "): every command has exited. Report: collapsar report " + run_dir in banner
        assert f"(writes {run_dir}/report.html)" in banner
        assert own.evaluate("document.getElementById('banner').className") == "banner ended"
        assert own.evaluate("document.getElementById('state').className") == "badge ended"
        end = own.evaluate("window.collapsarDashboard.snapshot.end")
        assert end["reason"] == "every command has exited" and end["exit_code"] == 0
        assert end["run_dir"] == run_dir and end["report"]["path"] == f"{run_dir}/report.html"
        assert 2_000_000 < end["t_us"] < 15_000_000

        rows = flow_rows(own)  # the final flows stay on screen
        assert ["client", "server"] in [row[:2] for row in rows], rows
        processes = own.evaluate(
            "[...document.querySelectorAll('#instances tbody tr')].map(r => r.children[0].textContent + ' '"
            " + r.children[3].textContent).sort()"
        )
        assert processes == ["client exited(0)", "server exited(0)"]
        assert own.evaluate("document.querySelectorAll('#events li.now').length") == 1
        for button in ("#start", "#stop", "#link-apply"):
            assert own.locator(button).is_disabled(), button
        own.screenshot(path=str(shots / "ended.png"))

        expect(agg.locator("#state")).to_have_text("ended", timeout=5000)
        assert "every command has exited" in text(agg, "#banner")
        assert text(agg, "#managers .manager") == f"{run['base'].split('//')[1]}: ended"
        assert ["client", "server"] in [row[:2] for row in flow_rows(agg)]
        agg.screenshot(path=str(shots / "ended-aggregated.png"))

        time.sleep(RETRY_WAIT_S)  # long enough for the browser to have tried the stream again
        for page in (own, agg):
            body = page.evaluate("document.body.innerText")
            assert "stream lost" not in body and "reconnecting" not in body
            assert text(page, "#state") == "ended"
            assert len(page.streams) == 1, page.streams
            assert page.problems == []
    finally:
        own_context.close()
        agg_context.close()
