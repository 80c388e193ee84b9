"""The dashboard against a real `collapsar run --dashboard --wait-start` of a
small rate-only topology (this host has no sch_netem), driven through the
page as a user would: token, start, watch an event, change a link, stop.
The tests share one run and one page, in order (about 20 s)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from test_control_run import leaf_rates
from test_local_support import Cli, host_snapshot, read_json, run_id_of

EVENT_AT_S = 3.0
TOPOLOGY = f"""\
experiment: {{name: browser}}
services:
  server: {{command: [iperf3, -s, -p, "5201"]}}
  client: {{command: [sh, -c, "sleep 0.3; iperf3 -c server -p 5201 -t 60"]}}
  idle: {{command: [sleep, "60"], egress: {{baseline: 1Mbps, burst-rate: 5Mbps, credits: 3s}}}}
bridges: [sw]
links:
  - {{from: client, to: sw, bandwidth: 40Mbps}}
  - {{from: idle, to: sw, bandwidth: 10Mbps}}
  - {{from: sw, to: server, bandwidth: 1Gbps}}
events:
  - {{at: {EVENT_AT_S}s, link: [idle, sw], action: leave}}
"""


def status(base: str) -> dict:
    with urllib.request.urlopen(base + "/status", timeout=5) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    (tmp / "browser.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "browser.yaml"),
        "--duration",
        "90s",
        "--wait-start",
        "--dashboard",
        "--subnet",
        "10.81.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--grace",
        "1s",
    )
    try:
        url = cli.wait_line("dashboard: ", 60).split()[1]
        run_dir = tmp / "runs" / run_id_of(cli.lines)
        yield {
            "cli": cli,
            "url": url,
            "base": url.rsplit("/dashboard/", 1)[0],
            "dir": run_dir,
            "token": (run_dir / "control-token").read_text().strip(),
            "ns": f"cx-{run_id_of(cli.lines)}-client",
        }
    finally:
        cli.kill()


def edge_classes(page, link_id: int) -> str:
    return page.evaluate(f"window.collapsarDashboard.cy.getElementById('l:{link_id}').classes().join(' ')")


def test_graph_shows_every_node_and_link(run, page, shots):
    page.goto(run["url"])
    page.wait_js("window.collapsarDashboard && window.collapsarDashboard.renders > 0")
    cy = "window.collapsarDashboard.cy"
    assert page.evaluate(f"{cy}.nodes().map(n => n.data('name')).sort()") == ["client", "idle", "server", "sw"]
    assert page.evaluate(f"{cy}.edges().map(e => e.source().data('name') + '-' + e.target().data('name')).sort()") == [
        "client-sw",
        "idle-sw",
        "sw-server",
    ]
    assert page.locator("#instances tbody tr").count() == 3
    assert page.locator("#state").text_content() == "waiting"
    # idle's egress credits, read from its bucket's counter: full, as it has sent nothing.
    (idle,) = [i for i in status(run["base"])["instances"] if i["name"] == "idle"]
    assert idle["egress"]["kind"] == "credits" and idle["egress"]["fill"] == 1.0
    assert idle["egress"]["credits_s"] == pytest.approx(3.0, abs=0.002)
    buckets = page.evaluate(
        "[...document.querySelectorAll('#instances tbody tr')].map(r => r.children[0].textContent + ': '"
        " + r.children[5].textContent)"
    )
    assert sorted(buckets) == ["client: ", "idle: credits 3.0 s at 5.0 Mbit/s, then 1.0 Mbit/s", "server: "]
    assert page.locator("#start").is_enabled()
    page.screenshot(path=str(shots / "waiting.png"))


def test_collapsar_dashboard_follows_the_run(run, browser, shots):
    """The aggregator (`collapsar dashboard --manager URL`) serves the same page."""
    dash = Cli("dashboard", "--manager", run["base"] + "/status", "--port", "0")
    try:
        url = dash.wait_line("dashboard: ", 30).split()[1]
        context = browser.new_context(viewport={"width": 1400, "height": 860})
        other = context.new_page()
        other.goto(url)
        deadline = time.monotonic() + 10
        while not other.evaluate("window.collapsarDashboard && window.collapsarDashboard.renders"):
            assert time.monotonic() < deadline, "the aggregated page never rendered"
            time.sleep(0.05)
        assert other.evaluate("window.collapsarDashboard.cy.nodes().length") == 4
        assert other.evaluate("window.collapsarDashboard.cy.edges().length") == 3
        manager = other.locator("#managers .manager").first.text_content()
        assert manager == f"{run['base'].split('//')[1]}: up"
        assert other.locator("#instances tbody tr td").nth(1).text_content() == run["base"].split("//")[1]
        other.screenshot(path=str(shots / "aggregated.png"))
        context.close()
    finally:
        dash.proc.terminate()
        assert dash.proc.wait(10) == 0


def test_control_without_the_token_is_refused(run, page):
    page.locator("#start").click()
    page.wait_js("document.getElementById('control-result').textContent.includes('token')")
    assert "enter the control token first" in page.locator("#control-result").text_content()
    refused = page.evaluate("fetch('/control/stop', {method: 'POST', body: '{}'}).then(r => r.status)")
    assert refused == 401
    wrong = page.evaluate(
        "fetch('/control/stop', {method: 'POST', body: '{}', headers: "
        "{Authorization: 'Bearer not-the-token'}}).then(r => r.status)"
    )
    assert wrong == 401 and status(run["base"])["state"] == "waiting"


def test_start_button(run, page):
    page.locator("#token").fill(run["token"])
    page.locator("#token").press("Enter")
    assert page.evaluate("sessionStorage.getItem('collapsar-control-token')") == run["token"]
    page.locator("#start").click()
    page.wait_js("document.getElementById('state').textContent === 'running'", 5)
    page.wait_js(
        "[...document.querySelectorAll('#instances tbody tr')].every(r => r.children[3].textContent === 'up')", 5
    )


def test_event_shows_within_a_second(run, page, shots):
    snap = status(run["base"])
    t0 = time.monotonic() - snap["t_us"] / 1e6  # the run's t=0 on our clock (to a few ms)
    assert "gone" not in edge_classes(page, 1)
    page.wait_js("window.collapsarDashboard.cy.getElementById('l:1').hasClass('gone')", EVENT_AT_S + 5)
    shown_after_s = time.monotonic() - (t0 + EVENT_AT_S)
    print(f"the event showed on the page {shown_after_s * 1000:.0f} ms after its time")
    assert 0 < shown_after_s < 1.0
    page.wait_js("document.querySelectorAll('#flows tbody tr td').length > 1", 5)
    page.locator("#flows tbody tr").first.click()
    page.wait_for_timeout(1200)  # a few points on the chart
    page.screenshot(path=str(shots / "running.png"))


def test_adhoc_change_from_the_page_reaches_the_kernel(run, page, shots):
    before = leaf_rates(run["ns"])
    page.locator("#link-select").select_option(label="client — sw")
    page.locator("#set-bandwidth").fill("8Mbps")
    page.locator("#link-apply").click()
    page.wait_js("document.getElementById('control-result').className !== 'pending'", 10)
    assert "ad-hoc: link client -- sw set bandwidth=8Mbps" in page.locator("#control-result").text_content()
    after = leaf_rates(run["ns"])
    # client -> server was shaped to 40 Mbit/s (minus Ethernet's framing), now 8; the
    # class towards idle, cut since idle's link left, keeps its old rate.
    assert max(before) == pytest.approx(40e6 * 1514 / 1538, rel=0.01)
    assert min(after) / max(before) == pytest.approx(0.2, rel=0.005)
    page.wait_js("window.collapsarDashboard.cy.getElementById('l:0').hasClass('degraded')", 2)
    assert "was 40M" in page.evaluate("window.collapsarDashboard.cy.getElementById('l:0').data('label')")
    page.wait_js("document.getElementById('events').textContent.includes('ad-hoc: link client')", 2)
    page.locator("#events").scroll_into_view_if_needed()
    page.wait_for_timeout(1500)  # the measured rate settles at the new limit on the chart
    page.screenshot(path=str(shots / "adhoc.png"))


def test_stop_button_stops_the_run(run, page, shots):
    plan = read_json(run["dir"] / "plan.json")
    page.locator("#stop").click()
    code, lines, stderr = run["cli"].finish(30)
    assert code == 0, stderr
    assert "stopping: stop requested through the control API" in lines
    left = host_snapshot()
    assert not {n["netns"] for n in plan["instances"]} & left["netns"]
    assert plan["bridge"] not in left["links"]
    # The run's last snapshot said it ended, and why: no "stream lost" alarm.
    page.wait_js("document.getElementById('state').textContent === 'ended'", 5)
    banner = page.locator("#banner").text_content()
    assert "stopped from the control API" in banner and f"collapsar report {run['dir']}" in banner
    assert "stream lost" not in banner and page.locator("#stop").is_disabled()
    page.screenshot(path=str(shots / "stopped.png"))
    assert page.problems == []
