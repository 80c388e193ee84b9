"""The probe's arithmetic and parsing (measure/probe.py); the real pings run in tests/vm."""

import pytest
from test_manager_fakes import path

from collapsar.errors import RunError
from collapsar.manager.measure import probe

PING_OUTPUT = """\
PING 10.77.0.3 (10.77.0.3) 56(84) bytes of data.
64 bytes from 10.77.0.3: icmp_seq=1 ttl=64 time=40.0 ms
64 bytes from 10.77.0.3: icmp_seq=2 ttl=64 time=44.0 ms
64 bytes from 10.77.0.3: icmp_seq=4 ttl=64 time=48.0 ms
64 bytes from 10.77.0.3: icmp_seq=5 ttl=64 time=90.5 ms

--- 10.77.0.3 ping statistics ---
5 packets transmitted, 4 received, 20% packet loss, time 1003ms
rtt min/avg/max/mdev = 40.000/55.625/90.500/20.331 ms
"""
ALL_LOST = """\
--- 10.77.0.3 ping statistics ---
20 packets transmitted, 0 received, 100% packet loss, time 400ms
"""


def test_expected_adds_both_directions():
    forward = path("a", "b", delay_us=20_000, loss_ratio=0.1, jitter_us=3_000)
    reverse = path("b", "a", delay_us=5_000, loss_ratio=0.2, jitter_us=4_000)
    exp = probe.expected(forward, reverse)
    assert exp.rtt_us == 25_000 and exp.jitter_us == 5_000
    assert exp.loss_ratio == pytest.approx(1 - 0.9 * 0.8)
    assert probe.expected(forward, None) is None and probe.expected(None, reverse) is None


def test_parse_ping_summary():
    m = probe.parse_ping("a", "b", PING_OUTPUT)
    # The median of the echoes, not ping's mean (pulled up by the one late echo).
    assert (m.sent, m.received, m.rtt_median_us, m.rtt_std_us) == (5, 4, 46_000, 20_333)
    assert m.loss_ratio == pytest.approx(0.2)
    lost = probe.parse_ping("a", "b", ALL_LOST)
    assert (lost.received, lost.rtt_median_us, lost.loss_ratio) == (0, None, 1.0)
    with pytest.raises(RunError, match=r"probe a -> b: ping printed no summary"):
        probe.parse_ping("a", "b", "connect: Network is unreachable\n")


def test_pairs_all_when_few_one_per_service_when_many():
    few = probe.pairs_to_probe({"x": ["x", "x-2"], "y": ["y"]})
    assert few == [("x", "x-2"), ("x", "y"), ("x-2", "x"), ("x-2", "y"), ("y", "x"), ("y", "x-2")]
    many = probe.pairs_to_probe({"x": [f"x-{i}" for i in range(10)], "y": ["y"], "z": []})
    assert many == [("x-0", "y"), ("y", "x-0")]


def test_ping_runs_in_the_source_namespace():
    assert probe.ping_argv("cx-1-a", "10.77.0.3", 50, 3.0) == [
        "ip",
        "netns",
        "exec",
        "cx-1-a",
        "ping",
        "-n",
        "-c",
        "50",
        "-i",
        "0.02",
        "-W",
        "3",
        "10.77.0.3",
    ]


def test_table_puts_configured_next_to_measured():
    m = probe.parse_ping("a", "b", PING_OUTPUT)
    records = probe.as_records([m], {("a", "b"): probe.Expected(44_000, 2_828, 0.05)})
    assert records[0]["expected"] == {"rtt_us": 44_000, "jitter_us": 2_828, "loss_ratio": 0.05}
    assert probe.probe_table(records) == [
        "pair    RTT configured  measured (median)  jitter configured  measured (std)  loss configured"
        "  measured (echoes)",
        "a -> b  44.00 ms        46.00 ms           2.83 ms            20.33 ms        5%               20% (1/5)",
    ]
    cut = probe.as_records([probe.parse_ping("a", "b", ALL_LOST)], {("a", "b"): None})
    assert probe.probe_table(cut)[1] == (
        "a -> b  cut             -                  -                  -               100%             100% (20/20)"
    )


def test_a_hung_ping_is_reported_not_fatal(monkeypatch):
    import subprocess

    def hung(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(probe.subprocess, "run", hung)
    (m,) = probe.probe([("a", "b")], {"a": "ns-a"}, {"b": "10.77.0.3"}, count=10)
    assert (m.sent, m.received, m.rtt_median_us) == (0, 0, None)
    records = probe.as_records([m], {("a", "b"): probe.Expected(1000, 0, 0.0)})
    assert probe.probe_table(records)[1].endswith("not measured (ping hung)")
