"""A service's egress token bucket: the language (collapsar.egress) and the
tbf it becomes (collapsar.tcal.bucket)."""

from __future__ import annotations

import struct

import pytest
from parse_support import problems

from collapsar.egress import EgressBucket
from collapsar.parser import parse_text
from collapsar.tcal.bucket import TbfParams, describe, tbf_options, tbf_params


def service(egress: str) -> str:
    return f"services:\n  web:\n    command: [x]\n    egress: {egress}\n"


def bucket_of(egress: str) -> EgressBucket | None:
    return parse_text(service(egress), "t.yaml").services[0].egress


def test_a_token_bucket():
    assert bucket_of("{rate: 50Mbps, burst: 64KiB}") == EgressBucket(50_000_000, 65536)
    assert bucket_of("{rate: 50Mbps, burst: 64KiB, peak: 1Gbps, peak-burst: 3KiB}") == EgressBucket(
        50_000_000, 65536, 10**9, 3072
    )
    assert parse_text("services: {web: {command: [x]}}\n", "t.yaml").services[0].egress is None


def test_a_credit_profile_is_a_bucket_as_deep_as_its_credits():
    # 5 minutes at 50 Mbit/s with a 10 Mbit/s baseline: (50 - 10) x 300 s = 1.5 GB of credits.
    got = bucket_of("{baseline: 10Mbps, burst-rate: 50Mbps, credits: 5m}")
    assert got == EgressBucket(10_000_000, 1_500_000_000, 50_000_000, None, credits=True)
    assert got.drain_s() == pytest.approx(300.0)
    assert bucket_of("{baseline: 10Mbps, burst-rate: 50Mbps, credits: 1GB}").burst_bytes == 10**9
    assert got.describe() == (
        "credits: baseline 10Mbps, burst rate 50Mbps, 1500000000 bytes of credits (300 s at the burst rate)"
    )


BAD = [
    (
        "64KiB",
        "expected a token bucket like {rate: 50Mbps, burst: 64KiB} or credits like "
        "{baseline: 10Mbps, burst-rate: 50Mbps, credits: 5m}, got '64KiB'",
    ),
    (
        "{rate: 50Mbps}",
        "burst is missing (expected a token bucket like {rate: 50Mbps, burst: 64KiB} or credits "
        "like {baseline: 10Mbps, burst-rate: 50Mbps, credits: 5m})",
    ),
    ("{rate: 50Mbps, burst: 1KiB}", "burst: expected 1538 bytes to 4GiB (a full frame to the kernel's most), got 1024"),
    (
        "{rate: 50Mbps, burst: 5GiB}",
        "burst: expected 1538 bytes to 4GiB (a full frame to the kernel's most), got 5368709120",
    ),
    ("{rate: 50Mbps, burst: 64KiB, peak: 10Mbps}", "peak must be above the rate (50Mbps)"),
    ("{rate: 50Mbps, burst: 64KiB, peak-burst: 3KiB}", "peak-burst needs a peak"),
    (
        "{rate: 50Mbps, burst: 64KiB, credits: 5m}",
        "use either rate and burst (a token bucket) or baseline, burst-rate and credits, not both",
    ),
    ("{baseline: 10Mbps, burst-rate: 5Mbps, credits: 5m}", "burst-rate must be above the baseline (10Mbps)"),
    (
        "{baseline: 10Mbps, burst-rate: 50Mbps, credits: lots}",
        "credits: expected a time at the burst rate like 5m, or a size like 1GB, got 'lots'",
    ),
    ("{baseline: 10Mbps, burst-rate: 50Mbps, credits: 2h}", "credits: 36000000000 bytes; expected 1538 to 4294967295"),
    ("{rate: 50Mbps, burst: 64KiB, peek: 1Gbps}", "unknown key 'peek' (did you mean 'peak'?)"),
]


@pytest.mark.parametrize(("egress", "message"), BAD, ids=[case[0] for case in BAD])
def test_bad_values_are_one_line_each(egress, message):
    assert problems(service(egress)) == [f"t.yaml:4: service web: egress: {message}"]


def test_the_tbf_carries_the_bucket_in_the_kernels_units():
    bucket = EgressBucket(10_000_000, 65536, 40_000_000, None)
    p = tbf_params(bucket, wire_overhead=True)
    # The frame share of the wire rate, as the htb classes: 1514 / 1538.
    share = 1514 / 1538  # sizes as rates: wire bytes, the kernel counting frames
    assert p == TbfParams(round(10_000_000 * share / 8), round(65536 * share), round(40_000_000 * share / 8), 3028, 83)
    assert tbf_params(bucket, wire_overhead=False) == TbfParams(1_250_000, 65536, 5_000_000, 3028, 0)
    options = tbf_options(tbf_params(bucket, wire_overhead=False))
    length, kind = struct.unpack_from("=HH", options)
    assert (length, kind) == (len(options), 2)  # TCA_OPTIONS, nested
    parms_len, parms_kind = struct.unpack_from("=HH", options, 4)
    assert parms_kind == 1 and parms_len == 4 + 36
    fields = struct.unpack_from("=BBHhHIBBHhHIIII", options, 8)
    assert fields[5] == 1_250_000 and fields[11] == 5_000_000 and fields[12] == 0  # rate, peak, limit
    assert fields[1] == 1 and fields[7] == 1  # ethernet link layer: no rate tables
    rest = options[8 + 36 :]
    assert struct.unpack_from("=HHI", rest) == (8, 6, 65536)  # TCA_TBF_BURST
    assert struct.unpack_from("=HHI", rest, 8) == (8, 7, 3028)  # TCA_TBF_PBURST
    assert describe(p).startswith("qdisc 8000: root tbf (egress token bucket): rate 1230494 B/s, burst 64513 B, peak")


@pytest.mark.parametrize(
    "egress",
    [
        "{rate: 50Mbps, burst: 64KiB}",
        "{rate: 50Mbps, burst: 64KiB, peak: 1Gbps, peak-burst: 3KiB}",
        "{baseline: 10Mbps, burst-rate: 50Mbps, credits: 5m}",
    ],
)
def test_to_yaml_writes_it_back(egress):
    from model_compare import without_where

    from collapsar.yamlout import to_yaml

    experiment = parse_text(service(egress), "t.yaml")
    assert without_where(parse_text(to_yaml(experiment), "t.yaml")) == without_where(experiment)
