"""Measured rates from (fake) counters, and the end-of-run table."""

import time
from collections import namedtuple

from test_manager_fakes import path

from collapsar.manager.addressing import plan_network
from collapsar.manager.measure.flows import flow_table, limited_by
from collapsar.manager.measure.throughput import Meter

Counter = namedtuple("Counter", "bytes packets wire_bytes")


class FakeCounters:
    def __init__(self):
        self.wire = 0
        self.detached = False

    def attach(self):
        return self

    def read(self):
        return {
            "10.77.0.3": Counter(self.wire, self.wire // 1000, self.wire),
            "192.0.2.1": Counter(5, 1, 5),
        }  # not an instance of the run: ignored

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


def test_segments_split_at_path_changes_and_skip_windows_idle_at_an_edge(monkeypatch):
    """10 Mbit/s for 3 s, then the path changes to 2 Mbit/s at t=3 s and the
    flow follows; it stops at t=4.5 s.  Each segment's median is its own rate,
    and the windows that straddle the change or the end do not drag it."""
    plan = plan_network("a1b2c3", ["a", "b"])
    sender = FakeCounters()
    meter = Meter(
        plan, lambda ifname, netns: sender if netns == "cx-a1b2c3-a" else FakeCounters(), say=lambda line: None
    )
    meter.start()
    meter._thread.join()
    clock = [0]
    monkeypatch.setattr(time, "monotonic_ns", lambda: clock[0])
    allowed = [10_000_000]  # what a's class for b holds: the sharing loop narrows it at t=1.5 s
    meter.follow(lambda src, dst: (10_000_000, False), t0_ns=0, allowed=lambda src, dst: allowed[0])
    wire = 0
    for step in range(1, 181):  # 9 s of 50 ms periods
        clock[0] = step * 50_000_000
        if step == 31:
            allowed[0] = 4_000_000  # of the first segment's 50 windows, 20 end at 10 and 30 at 4: median 4
        if step == 61:
            meter.mark("a", "b", 2_000_000, False)
            allowed[0] = None  # unlimited from then on
        if step <= 60:
            wire += 62_500  # 10 Mbit/s
        elif step <= 90:
            wire += 12_500  # 2 Mbit/s
        sender.wire = wire
        meter.sample()
    (ab,) = [f for f in meter.flows() if (f["src"], f["dst"]) == ("a", "b")]
    first, second = ab["segments"]
    assert (first["start_s"], first["end_s"], first["configured_bps"]) == (0.0, 3.05, 10_000_000)
    assert first["median_rate_bps"] == 10_000_000 and first["windows"] == 50
    assert first["median_share_bps"] == 4_000_000
    assert second["median_share_bps"] is None
    assert (second["start_s"], second["end_s"], second["configured_bps"]) == (3.05, None, 2_000_000)
    # 10 windows lie wholly in the sending part; the 20 that run into the
    # idle end would have put the median at about half the rate.
    assert second["median_rate_bps"] == 2_000_000 and second["windows"] == 10
    meter.close()


def test_flow_table_lists_flows_with_traffic_one_row_per_segment():
    flows = [
        {
            "src": "a",
            "dst": "b",
            "bytes": 5_000_000,
            "segments": [
                {
                    "start_s": 0.0,
                    "end_s": 4.0,
                    "configured_bps": 10_000_000,
                    "cut": False,
                    "median_rate_bps": 4_930_000,
                    "median_share_bps": 5_000_000,  # another flow had the other half of a link
                    "windows": 50,
                },
                {
                    "start_s": 4.0,
                    "end_s": 5.0,
                    "configured_bps": 1_000_000,
                    "cut": False,
                    "median_rate_bps": None,
                    "windows": 0,
                },
                {
                    "start_s": 4.5,
                    "end_s": 5.0,
                    "configured_bps": 2_000_000,
                    "cut": False,
                    "median_rate_bps": 1_990_000,
                    "median_share_bps": 2_000_000,
                    "windows": 9,
                },
                {
                    "start_s": 5.0,
                    "end_s": None,
                    "configured_bps": None,
                    "cut": True,
                    "median_rate_bps": 20_000,
                    "windows": 3,
                },
            ],
        },
        {"src": "b", "dst": "a", "bytes": 600, "segments": []},
    ]
    configured = {("a", "b"): path("a", "b", delay_us=5000, rate_bps=10_000_000, loss_ratio=0.01)}
    assert flow_table(flows, configured) == [
        "pair    during     configured rate  share (median)  measured (median 1 s)  limited by  "
        "RTT now  loss now  sent",
        "a -> b  0.0-4.0 s  10 Mbit/s        5 Mbit/s        4.93 Mbit/s            its share   "
        "10 ms    0.01      5 MB",
        "        4.5-5.0 s  2 Mbit/s         2 Mbit/s        1.99 Mbit/s            its path",
        "        5.0-end s  cut              -               20 kbit/s              cut",
    ]
    assert flow_table(flows[1:], configured) == []


def test_limited_by_names_the_cap_of_each_segment():
    seg = {"cut": False, "configured_bps": 20_000_000, "median_share_bps": 10_000_000}
    assert limited_by(seg) == "its share"  # the demo's 20 Mbit/s link shared by two flows
    assert limited_by(seg | {"median_share_bps": 19_900_000}) == "its path"  # within 1%: the path's own rate
    assert limited_by(seg | {"configured_bps": None}) == "its share"
    assert limited_by(seg | {"configured_bps": None, "median_share_bps": None}) == "-"
    assert limited_by(seg | {"cut": True}) == "cut"
    assert limited_by({"cut": False, "configured_bps": 5_000_000}) == "its path"  # from before shares were kept


def test_segments_end_in_the_players_thread_while_the_loop_reads_them():
    """The player ends segments (mark_paths, in its thread) while the loop
    reads them (flows(), for the sharing step and the status snapshot): a
    run of the VM tier died of `deque mutated during iteration` there."""
    import threading

    plan = plan_network("a1b2c3", ["a", "b"])
    meter = Meter(plan, lambda ifname, netns: FakeCounters(), say=lambda line: None)
    meter.start()
    meter._thread.join()
    meter.sample()  # a -> b carried traffic: it has segments
    stop = threading.Event()
    failures = []

    def player():
        while not stop.is_set():
            meter.mark_paths("a", ["b"], lambda src, dst: (1_000_000, False))

    thread = threading.Thread(target=player)
    thread.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                flows = meter.flows()
            except RuntimeError as error:
                failures.append(error)
                break
    finally:
        stop.set()
        thread.join()
    assert failures == []
    (ab,) = [f for f in flows if (f["src"], f["dst"]) == ("a", "b")]
    assert len(ab["segments"]) == 32  # SEGMENTS_KEPT: the oldest dropped
