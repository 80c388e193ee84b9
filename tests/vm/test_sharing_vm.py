"""Bandwidth sharing with real TCP and UDP flows in a real `collapsar run`
inside the stock-kernel VM (netem: delays, so RTTs differ, and congestion
loss).  Rates are low (a few Mbit/s): the guest's CPUs are emulated.

Run A, one dumbbell of Reno flows: a (RTT 20 ms) and b (RTT 40 ms) share
what c, held to 1 Mbit/s by its own access link, leaves of a 7 Mbit/s
bottleneck: 3.565 and 2.435 Mbit/s (RTT^-0.55, Reno's measured weight),
c keeps its 1 (maximization).  Mid-run the media driver is
killed: the manager reports it, restarts it, and the shares hold.
Run B: two UDP senders offer 4 Mbit/s each and a TCP flow shares a 6 Mbit/s
bottleneck with them: the UDP receivers see loss, the senders above their
share get congestion loss, and the TCP flow keeps its 2 Mbit/s.

The senders wait for a `go` file that the test makes once the run's eBPF
counters are attached: on the guest's emulated CPUs attaching takes seconds
per instance, and sharing needs the counters."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time

import pytest
from sharing_support import GOODPUT_SHARE, Run, received_per_second, trace_summary, udp_lost_ratio, udp_rates

M = 1_000_000

RTT_DUMBBELL = """\
experiment: {{name: dumbbell-rtt, congestion-control: reno}}
services:
  ra: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/ra.json"]}}
  rb: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/rb.json"]}}
  rc: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/rc.json"]}}
  a: {{command: [sh, -c, "{wait} iperf3 -c ra -t 14"]}}
  b: {{command: [sh, -c, "{wait} iperf3 -c rb -t 14"]}}
  c: {{command: [sh, -c, "{wait} iperf3 -c rc -t 14"]}}
bridges: [left, right]
links:
  - {{from: a, to: left, latency: 4ms, bandwidth: 100Mbps}}
  - {{from: b, to: left, latency: 14ms, bandwidth: 100Mbps}}
  - {{from: c, to: left, latency: 4ms, bandwidth: 1Mbps}}
  - {{from: right, to: ra, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: right, to: rb, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: right, to: rc, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: left, to: right, latency: 1ms, bandwidth: 7Mbps}}
"""

UDP_DUMBBELL = """\
experiment: {{name: dumbbell-udp}}
services:
  ru1: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/ru1.json"]}}
  ru2: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/ru2.json"]}}
  rt: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/rt.json"]}}
  u1: {{command: [sh, -c, "{wait} iperf3 -c ru1 -u -b 4M -t 10"]}}
  u2: {{command: [sh, -c, "{wait} iperf3 -c ru2 -u -b 4M -t 10"]}}
  t: {{command: [sh, -c, "{wait} iperf3 -c rt -t 10"]}}
bridges: [left, right]
links:
  - {{from: u1, to: left, latency: 4ms, bandwidth: 100Mbps}}
  - {{from: u2, to: left, latency: 4ms, bandwidth: 100Mbps}}
  - {{from: t, to: left, latency: 4ms, bandwidth: 100Mbps}}
  - {{from: right, to: ru1, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: right, to: ru2, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: right, to: rt, latency: 5ms, bandwidth: 100Mbps}}
  - {{from: left, to: right, latency: 1ms, bandwidth: 6Mbps}}
"""


def start(tmp, name, text, subnet):
    out = tmp / "out"
    out.mkdir()
    wait = f"while [ ! -e {out}/go ]; do sleep 0.2; done;"
    (tmp / f"{name}.yaml").write_text(text.format(out=out, wait=wait))
    run = Run(tmp / f"{name}.yaml", tmp / "runs", subnet, trace=out / "trace.jsonl")
    try:
        run.wait_line("counters attached on")
    except AssertionError:
        run.proc.kill()  # the guest is thrown away: no cleanup of the run needed
        run.finish()
        raise
    (out / "go").touch()
    return out, run


@pytest.fixture(scope="module")
def rtt_run(tmp_path_factory):
    out, run = start(tmp_path_factory.mktemp("rtt"), "rtt", RTT_DUMBBELL, "10.81.0.0/24")
    try:
        time.sleep(6.0)  # sharing has settled
        before = run.status()["sharing"]
        aeron = before["aeron"]
        os.kill(aeron["driver_pid"], signal.SIGKILL)
        # Noticing the loss can take seconds on the emulated CPUs (once over
        # 2 s): wait for the manager to say so (no status polling, which
        # stalls its loop here), then let messages flow on the new driver.
        run.wait_line(f"warning: sharing: media driver pid {aeron['driver_pid']} exited", timeout_s=60)
        time.sleep(2.0)
        after = run.status()["sharing"]
    finally:
        code = run.finish()
    return {
        "code": code,
        "lines": run.lines,
        "killed": aeron["driver_pid"],
        "before": before,
        "after": after,
        **{n: received_per_second(out / f"r{n}.json") for n in ("a", "b", "c")},
    }


def test_shares_follow_the_rtt_weights_and_the_access_limited_flow_keeps_its_rate(rtt_run, record_property):
    assert rtt_run["code"] == 0, rtt_run["lines"]
    ratio = 2**0.55  # a:b, RTTs 20 and 40 ms
    expected = {"a": 6 * M * ratio / (ratio + 1), "b": 6 * M / (ratio + 1), "c": 1 * M}  # c: its access link
    got = {name: statistics.median(rtt_run[name][3:13]) for name in expected}
    for name, rate in got.items():
        record_property(f"{name}_bps", round(rate))
    # The acceptance: shares in proportion to the model's weights within 10%,
    # the access-limited flow at its own rate within 10%.
    assert 0.9 * ratio < got["a"] / got["b"] < 1.1 * ratio, (got, rtt_run["lines"])
    assert abs(got["c"] - 1 * M * GOODPUT_SHARE) < 0.10 * M * GOODPUT_SHARE, (got, rtt_run["c"])
    # Absolute rates within 15%: TCP on the guest's emulated CPUs leaves
    # 5-10% of a few-Mbit/s link unused (with 1/RTT weights: a 3.46, b 1.70 of 3.77 and 1.88).
    for name in ("a", "b"):
        share = expected[name] * GOODPUT_SHARE
        assert abs(got[name] - share) < 0.15 * share, (name, got, rtt_run[name], rtt_run["lines"])


def test_killed_media_driver_is_reported_restarted_and_sharing_goes_on(rtt_run):
    killed = rtt_run["killed"]
    assert any(line.startswith(f"warning: sharing: media driver pid {killed} exited") for line in rtt_run["lines"]), (
        rtt_run["lines"]
    )
    aeron = rtt_run["after"]["aeron"]
    assert aeron["driver_restarts"] == 1 and aeron["driver_pid"] not in (None, killed)
    summary = next(line for line in rtt_run["lines"] if line.startswith("sharing: "))
    assert "driver restarts 1" in summary
    # Messages flow on the restarted driver: its own come back over IPC.
    own = [run["metadata"]["dropped_messages"].get("own", 0) for run in (rtt_run["before"], rtt_run["after"])]
    assert own[1] > own[0], own


@pytest.fixture(scope="module")
def udp_run(tmp_path_factory):
    # No status polling during this run: on the guest's emulated CPUs a
    # /status request every second stalled the manager's loop for seconds
    # (see the closing note); the loop's trace file carries the losses.
    out, run = start(tmp_path_factory.mktemp("udp"), "udp", UDP_DUMBBELL, "10.82.0.0/24")
    code = run.finish()
    loss = {}
    for line in (out / "trace.jsonl").read_text().splitlines():
        for flow in json.loads(line)["flows"]:
            loss.setdefault(flow["src"], []).append((json.loads(line)["t_us"], flow["congestion_loss_ratio"]))
    stalls = sorted((out.parent / "runs").glob("*/stalls.txt"))
    return {
        "code": code,
        "lines": run.lines,
        "loss": loss,
        "t": received_per_second(out / "rt.json"),
        "trace": trace_summary(out / "trace.jsonl", "t"),
        "stalls": "\n".join(path.read_text()[-6000:] for path in stalls),
        "u_lost": [udp_lost_ratio(out / f"ru{i}.json") for i in (1, 2)],
        "u_rates": [udp_rates(out / f"ru{i}.json") for i in (1, 2)],
    }


# This test was skipped for a session as "the manager loop stalls in the
# guest".  The stall was the run's own order: it started the commands, then
# set up sharing (Aeron, numpy's first model run) and the timeline, which took
# 10-19 s on the guest's emulated CPUs while the UDP flood ran.  The loop began
# after the traffic had ended.  Now everything is up before the commands start.
def test_udp_senders_see_loss_while_tcp_keeps_its_share(udp_run, record_property):
    assert udp_run["code"] == 0, udp_run["lines"]
    tcp = statistics.median(udp_run["t"][4:10])
    record_property("tcp_bps", round(tcp))
    record_property("udp_lost", udp_run["u_lost"])
    record_property("udp_offered_received_bps", [(round(o), round(r)) for o, r in udp_run["u_rates"]])
    share = 2 * M * GOODPUT_SHARE  # 6 Mbit/s among three equal-RTT flows
    # TCP keeps its share: never below 90% of it.  Above: up to 20%, because
    # on the guest the three 2 Mbit/s classes (one plain, two with netem loss)
    # delivered 5-15% over their rate (TCP 2.13, UDP 2.4 each) while the
    # loop's trace showed t's class at exactly 2.0 Mbit/s all along.
    assert 0.9 * share < tcp < 1.2 * share, (
        f"{tcp} {udp_run['t']}\n{udp_run['trace']}\n" + "\n".join(udp_run["lines"]) + udp_run["stalls"]
    )
    # Each UDP receiver gets about its share (over by up to 20%, as above),
    # and the rest of what its sender offered is lost: 4 Mbit/s asked for a
    # share of 2 is about half, less where the emulated sender fell short.
    for lost, (offered, received) in zip(udp_run["u_lost"], udp_run["u_rates"]):
        assert 0.9 * share < received < 1.2 * share, (udp_run["u_rates"], udp_run["u_lost"])
        assert 0.3 < offered / (4 * M) <= 1.05 and lost > 0.15, (udp_run["u_rates"], udp_run["u_lost"])
    # The model charged the congestion to the UDP senders, not to TCP.
    for sender in ("u1", "u2"):
        assert statistics.median(ratio for _, ratio in udp_run["loss"][sender]) > 0.3, udp_run["trace"]
    # TCP is charged while its slow start overshoots its share (measured
    # here: 0.44-0.73 for under 1 s, as a real bottleneck drops an overshoot),
    # and now and then for a period after (0.07 once in 60).  From 1.5 s after
    # it starts: nothing in most periods, and never as much as UDP.
    started_us = udp_run["loss"]["t"][0][0]
    settled = [ratio for t_us, ratio in udp_run["loss"]["t"] if t_us >= started_us + 1_500_000]
    assert settled and statistics.median(settled) < 0.01, udp_run["loss"]["t"]
    assert sum(ratio > 0.05 for ratio in settled) <= len(settled) // 10, udp_run["loss"]["t"]
    assert max(settled) < 0.3, udp_run["loss"]["t"]
