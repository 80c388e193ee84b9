"""bench/queue_bench.py without running anything: its scenarios validate and
give the reference the buffer the table divides by, pings are split by
phase, and the table sets each wait against that buffer."""

from __future__ import annotations

from pathlib import Path

import pytest

from collapsar.errors import CollapsarError
from collapsar.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(load_bench):
    return load_bench("queue_bench")


def test_the_scenario_has_n_senders_and_the_reference_buffer_the_table_assumes(bench):
    from reference_plan import plan_reference

    experiment = parse_text(bench.scenario("reno", 3), "q.yaml")
    assert experiment.settings.congestion_control == "reno"
    assert sorted(s.name for s in experiment.services) == sorted(
        ["srv", "pinger", "bulk1", "bulk2", "bulk3", "sink1", "sink2", "sink3"]
    )
    plan = plan_reference(experiment, "qb", "10.99.0.0/16")
    bottleneck = next(h for h in plan.hops if (h.src, h.dst) == ("sw1", "sw2"))
    # 44 ms of round trip at 10 Mbit/s in 1538-byte frames: 36, i.e. BUFFER_MS.
    assert bottleneck.queue_pkts == 36
    assert bench.BUFFER_MS == pytest.approx(36 * 1538 * 8 / 10e6 * 1000, abs=0.05)


def test_pings_are_split_into_idle_and_loaded_and_the_table_gives_the_part_of_the_buffer(bench):
    # First reply at t=2 s; one every 100 ms to 27.9 s: 45 ms idle, 78.2 loaded.
    lines = [
        f"[{1000 + k / 10:.6f}] 64 bytes from 10.0.0.2: icmp_seq={k} ttl=64 time={45.0 if 2 + k / 10 < 8 else 78.2} ms"
        for k in range(260)
    ]
    got = bench.pings("PING srv\n" + "\n".join(lines))
    assert len(got["idle"]) == 55  # 2.0-7.4 s
    assert len(got["loaded"]) == 150  # 12.0-26.9 s
    assert set(got["idle"]) == {45.0} and set(got["loaded"]) == {78.2}
    with pytest.raises(CollapsarError, match="no ping replies"):
        bench.pings("PING srv\n")
    run = {"system": "reference", "control": "cubic", "flows": 1, "run": 1, "took_s": 40.0, "pings": got}
    table = bench.summarise({"runs": [run]})
    # (78.2 - 45.0) / 44.3 = 0.75
    assert "cubic x 1 reference |   45.0 |   78.2 [  78.2,   78.2] |   78.2 |   33.2 |  0.75" in table
