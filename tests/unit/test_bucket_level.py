"""The egress bucket's level from its byte counter (measure/bucket.py): the
kernel's arithmetic, in the kernel's frame bytes, shown as wire bytes."""

import pytest

from collapsar.egress import EgressBucket
from collapsar.manager.measure.bucket import BucketGauge
from collapsar.tcal.bucket import tbf_params

SHARE = 1514 / 1538


def gauge(bucket: EgressBucket) -> BucketGauge:
    return BucketGauge(bucket, tbf_params(bucket, wire_overhead=True), now_s=100.0, sent_bytes=5_000)


def test_a_bucket_starts_full_spends_what_leaves_and_refills_at_its_rate():
    bucket = EgressBucket(8_000_000, 100_000)  # 1 MB/s of wire bytes, 100 kB deep
    g = gauge(bucket)
    assert g.as_dict() == {
        "kind": "bucket",
        "rate_bps": 8_000_000,
        "peak_bps": None,
        "depth_bytes": 100_000,
        "tokens_bytes": 100_000,
        "fill": 1.0,
        "stale": False,
    }
    g.sample(5_000 + round(60_000 * SHARE), 100.0)  # 60 kB of wire bytes left at once
    assert g.as_dict()["tokens_bytes"] == 40_000
    g.sample(5_000 + round(60_000 * SHARE), 100.02)  # 20 ms idle: 20 kB back
    assert g.as_dict()["tokens_bytes"] == pytest.approx(60_000, abs=2)
    g.sample(5_000 + round(60_000 * SHARE), 101.0)  # a second idle: full, never beyond
    assert g.as_dict()["tokens_bytes"] == 100_000 and g.as_dict()["fill"] == 1.0


def test_a_sender_above_the_rate_empties_it_and_it_stays_empty():
    g = gauge(EgressBucket(8_000_000, 100_000))
    sent, now = 5_000, 100.0
    for _ in range(40):  # 2 MB/s of wire bytes against 1 MB/s of tokens, for 2 s
        now += 0.05
        sent += round(100_000 * SHARE)
        g.sample(sent, now)
    assert g.as_dict()["tokens_bytes"] == 0 and g.as_dict()["fill"] == 0.0


def test_credits_are_shown_as_the_time_they_last_at_the_burst_rate():
    # (10 - 2) Mbit/s x 4 s = 4 MB of credits
    credits = EgressBucket(2_000_000, 4_000_000, 10_000_000, None, credits=True)
    g = gauge(credits)
    assert g.as_dict()["kind"] == "credits" and g.as_dict()["credits_s"] == pytest.approx(4.0, abs=0.001)
    # One second at the burst rate: 1.25 MB left, 0.25 MB refilled at the baseline: 3 s remain.
    g.sample(5_000 + round(1_250_000 * SHARE), 101.0)
    assert g.as_dict()["credits_s"] == pytest.approx(3.0, abs=0.001)
