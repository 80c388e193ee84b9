"""Measured rates from (fake) counters, and the end-of-run table."""

import time
from collections import namedtuple

from collapsar.manager.addressing import plan_network
from collapsar.manager.report import flow_table
from collapsar.manager.throughput import Meter

from test_manager_fakes import path

Counter = namedtuple("Counter", "bytes packets wire_bytes")


class FakeCounters:
    def __init__(self):
        self.wire = 0
        self.detached = False

    def attach(self):
        return self

    def read(self):
        return {"10.77.0.3": Counter(self.wire, self.wire // 1000, self.wire),
                "192.0.2.1": Counter(5, 1, 5)}  # not an instance of the run: ignored

    def detach(self):
        self.detached = True


def test_rates_over_the_window_and_median_while_active(monkeypatch):
    plan = plan_network("a1b2c3", ["a", "b"])
    made = {}

    def factory(ifname, netns):
        made[netns] = FakeCounters()
        return made[netns]

    meter = Meter(plan, factory, say=lambda line: None)
    meter.start()
    meter._thread.join()
    assert meter.attached == 2
    clock = [0]
    monkeypatch.setattr(time, "monotonic_ns", lambda: clock[0])
    sender = made["cx-a1b2c3-a"]
    for step in range(41):  # 2 s at 50 ms; 1 Mbit/s (125 kB/s) of wire bytes
        clock[0] = step * 50_000_000
        sender.wire = step * 6_250
        meter.sample()
    flows = {(f["src"], f["dst"]): f for f in meter.flows()}
    assert set(flows) == {("a", "b"), ("b", "b")}
    ab = flows[("a", "b")]
    assert ab["rate_bps"] == 1_000_000 and ab["median_rate_bps"] == 1_000_000
    assert ab["wire_bytes"] == 250_000
    meter.close()
    assert all(c.detached for c in made.values()) and meter.attached == 0


def test_no_factory_means_no_measurements():
    meter = Meter(plan_network("a1b2c3", ["a"]), None, say=print)
    meter.start()
    meter.sample()
    assert meter.flows() == [] and meter.attached == 0


def test_flow_table_lists_flows_with_traffic_only():
    flows = [{"src": "a", "dst": "b", "bytes": 5_000_000, "median_rate_bps": 9_870_000},
             {"src": "b", "dst": "a", "bytes": 600, "median_rate_bps": 1000}]
    configured = {("a", "b"): path("a", "b", delay_us=5000, rate_bps=10_000_000, loss_ratio=0.01)}
    assert flow_table(flows, configured) == [
        "pair    configured rate  RTT    loss  measured (median 1 s)  sent",
        "a -> b  10 Mbit/s        10 ms  0.01  9.87 Mbit/s            5 MB"]
    assert flow_table(flows[1:], configured) == []
