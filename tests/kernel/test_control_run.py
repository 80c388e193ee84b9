"""The control API of a real local run on this host's kernel: --wait-start
holds the commands and the timeline, a request without the token is refused,
an ad-hoc link change moves the htb rates in the namespaces and survives a
later event on another link, and stop tears the run down.  One run, ~6 s."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from test_local_support import Cli, host_snapshot, read_json, run_id_of

TOPOLOGY = """\
experiment: {name: control}
services:
  c1: {command: [sleep, "60"]}
  c2: {command: [sleep, "60"]}
  srv: {command: [sleep, "60"]}
bridges: [sw]
links:
  - {from: c1, to: sw, bandwidth: 50Mbps}
  - {from: c2, to: sw, bandwidth: 20Mbps}
  - {from: sw, to: srv, bandwidth: 1Gbps}
events:
  - {at: 1500ms, link: [c2, sw], set: {bandwidth: 5Mbps}}
"""
_RATE = re.compile(r"\brate (\d+(?:\.\d+)?)(G|M|K|)bit\b")
_SCALE = {"G": 1e9, "M": 1e6, "K": 1e3, "": 1}


def leaf_rates(netns: str) -> list[float]:
    """htb leaf class rates (bit/s) on the instance's eth0, sorted."""
    out = subprocess.run(
        ["tc", "-n", netns, "class", "show", "dev", "eth0"], check=True, capture_output=True, text=True
    ).stdout
    rates = []
    for line in out.splitlines():
        match = _RATE.search(line)
        if " leaf " in line and match:
            rates.append(float(match.group(1)) * _SCALE[match.group(2)])
    rates = [rate for rate in rates if rate < 1e10]  # not the unshaped default class
    return sorted(rates)


def post(base: str, action: str, body: dict | None, token: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(f"{base}/control/{action}", method="POST", data=json.dumps(body or {}).encode())
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(base: str, route: str) -> dict:
    with urllib.request.urlopen(base + route, timeout=10) as reply:
        return json.loads(reply.read())


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("control")
    (tmp / "control.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "control.yaml"),
        "--duration",
        "60s",
        "--wait-start",
        "--subnet",
        "10.79.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--grace",
        "1s",
    )
    try:
        cli.wait_line("waiting for start", 60)
        run_dir = tmp / "runs" / run_id_of(cli.lines)
        token = (run_dir / "control-token").read_text().strip()
        base = f"http://127.0.0.1:{int((run_dir / 'status-port').read_text())}"
        yield {
            "cli": cli,
            "dir": run_dir,
            "token": token,
            "base": base,
            "ns": lambda name: f"cx-{run_id_of(cli.lines)}-{name}",
        }
    finally:
        cli.kill()


def test_token_printed_and_owner_only(run):
    printed = [line for line in run["cli"].lines if line.startswith("control token: ")]
    assert printed and printed[0].split()[2] == run["token"]
    assert (run["dir"] / "control-token").stat().st_mode & 0o777 == 0o600


def test_wait_start_then_start(run):
    status = get(run["base"], "/status")
    assert status["state"] == "waiting" and status["t_us"] == 0
    assert {i["status"] for i in status["instances"]} == {"absent"}
    assert leaf_rates(run["ns"]("c1")) == pytest.approx(
        [20e6 * 1514 / 1538, 50e6 * 1514 / 1538], rel=0.01
    )  # shaping in place before start
    assert post(run["base"], "start", None, None)[0] == 401
    assert post(run["base"], "start", None, "wrong-token")[0] == 401
    assert get(run["base"], "/status")["state"] == "waiting"
    code, reply = post(run["base"], "start", None, run["token"])
    assert (code, reply) == (200, {"ok": True, "state": "starting"})
    assert wait_until(lambda: {i["status"] for i in get(run["base"], "/status")["instances"]} == {"up"})
    assert post(run["base"], "start", None, run["token"])[0] == 409


def test_adhoc_change_moves_htb_and_persists(run):
    base, token = run["base"], run["token"]
    c1_before = leaf_rates(run["ns"]("c1"))
    change = {"link": ["c1", "sw"], "set": {"bandwidth": "10Mbps"}}
    assert post(base, "link", change, None)[0] == 401
    assert leaf_rates(run["ns"]("c1")) == c1_before
    code, reply = post(base, "link", change, token)
    assert code == 200 and reply["label"] == "ad-hoc: link c1 -- sw set bandwidth=10Mbps"
    after = leaf_rates(run["ns"]("c1"))
    # c1 -> c2 and c1 -> srv both cross c1's link: both now at 10 (was 20 and 50).
    assert [rate / c1_before[1] for rate in after] == pytest.approx([0.2, 0.2], rel=0.005)
    assert leaf_rates(run["ns"]("srv"))[0] == pytest.approx(c1_before[0] / 2, rel=0.005)  # srv -> c1
    # The file's event at 1.5 s changes c2's link; c1's ad-hoc rate stays.
    assert wait_until(lambda: get(base, "/events")["pending"] == 0)
    assert leaf_rates(run["ns"]("c1")) == pytest.approx([c1_before[1] * 0.1, c1_before[1] * 0.2], rel=0.005)
    labels = [(e["label"], e["adhoc"]) for e in get(base, "/events")["applied"]]
    assert labels == [("ad-hoc: link c1 -- sw set bandwidth=10Mbps", True), ("link c2 -- sw set", False)]


def test_bad_change_is_one_clear_400(run):
    code, reply = post(run["base"], "link", {"link": ["c1", "sw"], "set": {"bandwidth": "fast"}}, run["token"])
    assert code == 400 and reply["error"].startswith(
        "link change refused: link c1 -> sw: set: bandwidth: expected a rate"
    )


def test_stop_tears_down(run):
    cli = run["cli"]
    assert post(run["base"], "stop", None, None)[0] == 401
    assert cli.proc.poll() is None
    assert post(run["base"], "stop", None, run["token"]) == (200, {"ok": True, "state": "stopping"})
    code, lines, stderr = cli.finish(30)
    assert code == 0, stderr
    assert "stopping: stop requested through the control API" in lines
    plan = read_json(run["dir"] / "plan.json")
    left = host_snapshot()
    # Other tests may run meanwhile: look for what this run made, by name.
    assert not {n["netns"] for n in plan["instances"]} & left["netns"]
    assert not ({n["veth"] for n in plan["instances"]} | {plan["bridge"]}) & left["links"]
    events = read_json(run["dir"] / "events.json")
    assert [e["adhoc"] for e in events] == [True, False]
