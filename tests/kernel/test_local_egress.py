"""An instance's egress token bucket (`egress:`) in a real `collapsar run` on
this host's kernel (tbf above the htb tree; no netem needed).

Throughput is what the iperf3 servers received per interval.  A token
bucket of 6 Mbit/s caps the sum of two flows to two destinations whose
paths allow 100 Mbit/s each; a credit profile (2 Mbit/s baseline, 10
Mbit/s while credits last, credits for 4 s at 10) lets a flow run at 10
until its credits are gone, 4 s after it starts (the bucket starts full),
then at 2."""

from __future__ import annotations

import json
import statistics

from test_local_support import run_to_end

GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500

TOPOLOGY = """\
experiment: {{name: egress}}
services:
  sink1: {{command: [iperf3, -s, -1, -i, "0.5", -J, --logfile, "{out}/sink1.json"]}}
  sink2: {{command: [iperf3, -s, -1, -i, "0.5", -J, --logfile, "{out}/sink2.json"]}}
  src:
    command: [sh, -c, "sleep 0.5; iperf3 -c sink1 -t {seconds} & {second} wait"]
    egress: {egress}
bridges: [s]
links:
  - {{from: src, to: s, bandwidth: 100Mbps}}
  - {{from: s, to: sink1, bandwidth: 100Mbps}}
  - {{from: s, to: sink2, bandwidth: 100Mbps}}
"""


def run(tmp_path, name: str, egress: str, seconds: int, both: bool) -> dict[str, list[float]]:
    out = tmp_path / name
    out.mkdir()
    second = f"iperf3 -c sink2 -t {seconds} &" if both else "iperf3 -c sink2 -t 1 >/dev/null;"
    (out / "e.yaml").write_text(TOPOLOGY.format(out=out, seconds=seconds, second=second, egress=egress))
    runs = str(out / "runs")
    run_to_end("run", str(out / "e.yaml"), "--subnet", "10.79.2.0/24", "--run-dir", runs, "--status-port", "-1")
    return {
        sink: [i["sum"]["bits_per_second"] for i in json.loads((out / f"{sink}.json").read_text())["intervals"]]
        for sink in ("sink1", "sink2")
    }


def test_a_token_bucket_caps_the_sum_of_every_path(tmp_path):
    got = run(tmp_path, "bucket", "{rate: 6Mbps, burst: 64KiB}", 6, both=True)
    # Each flow's mean over 1-5 s, added: each server times its intervals
    # from its own flow's start, and the two flows trade the bucket back and
    # forth, so a sum interval by interval swings: in one run the median of
    # those sums was 5.25 where the means added up to 5.46 (CI failed on
    # such a median, 5.25 Mbit/s).
    total = sum(statistics.mean(got[sink][2:10]) for sink in ("sink1", "sink2"))
    print(f"two flows under a 6 Mbit/s bucket: {total / 1e6:.2f} Mbit/s together")
    assert abs(total - 6e6 * GOODPUT_SHARE) <= 0.05 * 6e6


def test_credits_last_as_long_as_configured(tmp_path):
    got = run(tmp_path, "credits", "{baseline: 2Mbps, burst-rate: 10Mbps, credits: 4s}", 9, both=False)
    rates = got["sink1"]
    threshold = 6e6 * GOODPUT_SHARE  # halfway between the burst rate and the baseline
    # The drop for good: the first interval from which the next four all stay
    # below (slow start's first intervals may dip and overshoot).
    drained = next(i for i in range(len(rates) - 4) if all(r < threshold for r in rates[i : i + 5])) * 0.5
    print([round(rate / 1e6, 2) for rate in rates])
    # The fast phase once the 1 s flow to sink2 (sharing the bucket at
    # first) is over and the sharing loop has given sink1 the whole rate:
    # 2.0-4.0 s of sink1's flow (CI once saw 7.7 Mbit/s in 1.5-2.0 s).
    fast = statistics.median(rates[4:8])
    slow = statistics.median(rates[12:17])
    print(f"credits: {fast / 1e6:.2f} Mbit/s until {drained:.1f} s, then {slow / 1e6:.2f} Mbit/s")
    assert abs(fast - 10e6 * GOODPUT_SHARE) <= 0.05 * 10e6
    assert abs(slow - 2e6 * GOODPUT_SHARE) <= 0.05 * 2e6
    # The interval in which the rate falls holds the moment the credits run out.
    assert 3.5 <= drained <= 4.5
