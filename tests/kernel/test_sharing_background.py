"""Background traffic in a real `collapsar run` on this host's kernel: a
20 Mbit/s bottleneck carrying 8 Mbit/s of background traffic (no packets:
a flow in the sharing model) leaves an iperf3 flow the rest.

The flow and the background have the same round trip (this host has no
netem, so the links have no latency: the flow's round trip counts as 1 us,
and the background's is set to that), so both weigh alike, and the
background wants less than half: the model gives it its 8 and the flow 12; the flow's goodput is then 12 x 1448/1538.
Then the background switches to 16 Mbit/s (an event): above its half, it
gets its half (10) and so does the flow."""

from __future__ import annotations

import json
import statistics

from test_local_support import run_to_end

GOODPUT_SHARE = 1448 / 1538

TOPOLOGY = """\
experiment: {{name: background}}
services:
  sink: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/sink.json"]}}
  src: {{command: [sh, -c, "sleep 0.5; iperf3 -c sink -t 12"]}}
bridges: [left, right]
links:
  - {{from: src, to: left, bandwidth: 100Mbps}}
  - {{from: right, to: sink, bandwidth: 100Mbps}}
  - {{from: left, to: right, latency: 0us, bandwidth: 20Mbps, up: {{background: {{mean: 8Mbps, rtt: 1us}}}}}}
events:
  - {{at: 6.5s, link: [left, right], set: {{up: {{background: {{mean: 16Mbps, rtt: 1us}}}}}}}}
"""


def test_a_flow_gets_what_the_background_leaves(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "bg.yaml").write_text(TOPOLOGY.format(out=out))
    runs = str(tmp_path / "runs")
    run_to_end("run", str(tmp_path / "bg.yaml"), "--subnet", "10.79.1.0/24", "--run-dir", runs, "--status-port", "-1")
    seconds = [i["sum"]["bits_per_second"] for i in json.loads((out / "sink.json").read_text())["intervals"]]
    before, after = statistics.median(seconds[2:5]), statistics.median(seconds[8:11])
    print(f"flow beside 8 Mbit/s of background: {before / 1e6:.2f} Mbit/s; beside 16: {after / 1e6:.2f} Mbit/s")
    assert abs(before - 12e6 * GOODPUT_SHARE) <= 0.05 * 12e6
    assert abs(after - 10e6 * GOODPUT_SHARE) <= 0.05 * 10e6
