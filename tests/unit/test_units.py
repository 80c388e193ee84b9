"""collapsar.units: every unit, spelling and rejection, table-driven."""

import pytest

from collapsar.errors import UnitError
from collapsar.units import (
    format_duration_us,
    format_rate_bps,
    parse_duration_us,
    parse_loss_ratio,
    parse_rate_bps,
    parse_size_bytes,
)

DURATIONS = [
    ("10ms", 10_000),
    ("250us", 250),
    ("250µs", 250),
    ("1.5s", 1_500_000),
    ("2m", 120_000_000),
    ("2min", 120_000_000),
    ("1h", 3_600_000_000),
    ("2000ns", 2),
    (" 7 ms ", 7_000),
    (0, 0),
    ("0", 0),
    (0.0, 0),
    (".5ms", 500),
    ("1e3us", 1000),
    ("1.ms", 1000),
]


@pytest.mark.parametrize(("text", "expected"), DURATIONS)
def test_parse_duration(text, expected):
    assert parse_duration_us(text) == expected


DURATION_ERRORS = [
    ("10", "expected a duration like 10ms, 250us or 1.5s (a unit is required), got '10'"),
    (10, "expected a duration like 10ms, 250us or 1.5s (a unit is required), got 10"),
    ("10 parsecs", "expected a duration like 10ms, 250us or 1.5s, got unknown time unit 'parsecs' in '10 parsecs'"),
    ("-5ms", "expected a duration like 10ms, 250us or 1.5s, got '-5ms'"),
    ("1.5us", "'1.5us' is finer than one microsecond"),
    (True, "expected a duration like 10ms, 250us or 1.5s, got True"),
    (None, "expected a duration like 10ms, 250us or 1.5s, got NoneType None"),
    (float("nan"), "expected a duration like 10ms, 250us or 1.5s, got nan"),
    ("1e999s", "expected a duration like 10ms, 250us or 1.5s, got '1e999s'"),
    ("1e300h", "'1e300h' is too large"),
    ("", "expected a duration like 10ms, 250us or 1.5s, got ''"),
]


@pytest.mark.parametrize(("text", "message"), DURATION_ERRORS)
def test_parse_duration_rejects(text, message):
    with pytest.raises(UnitError) as error:
        parse_duration_us(text)
    assert str(error.value) == message


RATES = [
    ("128Kbps", 128_000),
    ("10Mbps", 10_000_000),
    ("1Gbps", 10**9),
    ("1.5Gbps", 1_500_000_000),
    ("10mbit", 10_000_000),
    ("128kbit", 128_000),
    ("1gbit", 10**9),
    ("1Tbps", 10**12),
    ("9600bps", 9600),
    ("9600bit", 9600),
    ("2.5 Mbps", 2_500_000),
]


@pytest.mark.parametrize(("text", "expected"), RATES)
def test_parse_rate(text, expected):
    assert parse_rate_bps(text) == expected


RATE_ERRORS = [
    ("100", "expected a rate like 128Kbps, 10Mbps or 1Gbps (a unit is required), got '100'"),
    ("10MB/s", "expected a rate like 128Kbps, 10Mbps or 1Gbps, got unknown rate unit 'MB/s' in '10MB/s'"),
    ("0Mbps", "expected a rate above zero, got '0Mbps'"),
    ("0.5bps", "'0.5bps' is finer than one bit per second"),
    ([1], "expected a rate like 128Kbps, 10Mbps or 1Gbps, got list [1]"),
]


@pytest.mark.parametrize(("text", "message"), RATE_ERRORS)
def test_parse_rate_rejects(text, message):
    with pytest.raises(UnitError) as error:
        parse_rate_bps(text)
    assert str(error.value) == message


LOSSES = [("0.1%", 0.001), ("0.001", 0.001), (0.25, 0.25), (0, 0.0), ("100%", 1.0), (1, 1.0), ("50 %", 0.5)]


@pytest.mark.parametrize(("text", "expected"), LOSSES)
def test_parse_loss(text, expected):
    assert parse_loss_ratio(text) == pytest.approx(expected, abs=1e-15)


LOSS_ERRORS = [
    ("101%", "expected a loss like 0.1% or 0.001 between 0 and 100%, got '101%'"),
    (1.5, "expected a loss like 0.1% or 0.001 between 0 and 100%, got 1.5"),
    ("5dB", "expected a loss like 0.1% or 0.001, got unknown unit 'dB' in '5dB'"),
    ("-1%", "expected a loss like 0.1% or 0.001, got '-1%'"),
]


@pytest.mark.parametrize(("text", "message"), LOSS_ERRORS)
def test_parse_loss_rejects(text, message):
    with pytest.raises(UnitError) as error:
        parse_loss_ratio(text)
    assert str(error.value) == message


SIZES = [
    ("512m", 512 * 2**20),
    ("2GiB", 2 * 2**30),
    ("1GB", 10**9),
    ("64k", 65536),
    (4096, 4096),
    ("1.5k", 1536),
    ("10b", 10),
    ("1t", 2**40),
]


@pytest.mark.parametrize(("text", "expected"), SIZES)
def test_parse_size(text, expected):
    assert parse_size_bytes(text) == expected


SIZE_ERRORS = [
    ("12 parsecs", "expected a size like 512m, 2GiB or 1GB, got unknown size unit 'parsecs' in '12 parsecs'"),
    (0, "expected a size above zero, got 0"),
    ("0.3b", "'0.3b' is finer than one byte"),
]


@pytest.mark.parametrize(("text", "message"), SIZE_ERRORS)
def test_parse_size_rejects(text, message):
    with pytest.raises(UnitError) as error:
        parse_size_bytes(text)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("delay_us", "text"),
    [
        (10_000, "10ms"),
        (1500, "1500us"),
        (1_500_000, "1500ms"),
        (2_000_000, "2s"),
        (120_000_000, "2m"),
        (7_200_000_000, "2h"),
        (1, "1us"),
        (0, "0us"),
    ],
)
def test_format_duration(delay_us, text):
    assert format_duration_us(delay_us) == text
    assert parse_duration_us(text) == delay_us


@pytest.mark.parametrize(
    ("rate_bps", "text"),
    [(10**7, "10Mbps"), (1500, "1500bps"), (128_000, "128Kbps"), (10**9, "1Gbps"), (2_500_000, "2500Kbps")],
)
def test_format_rate(rate_bps, text):
    assert format_rate_bps(rate_bps) == text
    assert parse_rate_bps(text) == rate_bps
