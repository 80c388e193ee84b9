"""Units, parsed once where input enters.

Every parser here takes the user's text (or a YAML number) and returns an
integer or float whose unit is in the caller's field name: `delay_us`,
`rate_bps`, `loss_ratio`, `size_bytes`.  Bad input raises `UnitError` saying
what was expected; the topology parser adds the file and line.

Rates are decimal bits per second (`10Mbps` = 10_000_000), also written as tc
writes them (`10mbit`).  Note that tc itself reads `kbps` as kiloBYTES per
second; Collapsar does not: every rate unit here is bits.
"""

from __future__ import annotations

import math
import re

from collapsar.errors import UnitError

_NUMBER = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-zµ%/]*)\s*$")

_DURATION_US = {
    "ns": 1e-3,
    "us": 1.0,
    "µs": 1.0,
    "ms": 1e3,
    "s": 1e6,
    "m": 60e6,
    "min": 60e6,
    "h": 3600e6,
}

# Lower-cased unit -> bits per second.
_RATE_BPS = {
    "bps": 1,
    "bit": 1,
    "kbps": 10**3,
    "kbit": 10**3,
    "mbps": 10**6,
    "mbit": 10**6,
    "gbps": 10**9,
    "gbit": 10**9,
    "tbps": 10**12,
    "tbit": 10**12,
}

# Sizes: binary for the short forms, as Docker reads `512m`; explicit SI forms are decimal.
_SIZE_BYTES = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "kb": 10**3,
    "m": 2**20,
    "mib": 2**20,
    "mb": 10**6,
    "g": 2**30,
    "gib": 2**30,
    "gb": 10**9,
    "t": 2**40,
    "tib": 2**40,
    "tb": 10**12,
}


def _split(text: object, expected: str) -> tuple[float, str]:
    """Split '10ms' into (10.0, 'ms'); numbers from YAML come without a unit."""
    if isinstance(text, bool):
        raise UnitError(f"expected {expected}, got {text!r}")
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise UnitError(f"expected {expected}, got {text!r}")
        return float(text), ""
    if not isinstance(text, str):
        raise UnitError(f"expected {expected}, got {type(text).__name__} {text!r}")
    match = _QUANTITY.match(text)
    if not match or not math.isfinite(float(match.group(1))):
        raise UnitError(f"expected {expected}, got {text!r}")
    return float(match.group(1)), match.group(3)


def _integral(value: float, unit_name: str, text: object) -> int:
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is too large")
    rounded = round(value)
    if abs(value - rounded) > 1e-6 * max(1.0, abs(value)):
        raise UnitError(f"{text!r} is finer than one {unit_name}")
    return int(rounded)


def parse_duration_us(text: object) -> int:
    """'10ms' -> 10000; '250us' -> 250; '1.5s' -> 1500000; 0 needs no unit."""
    expected = "a duration like 10ms, 250us or 1.5s"
    value, unit = _split(text, expected)
    if unit == "":
        if value == 0:
            return 0
        raise UnitError(f"expected {expected} (a unit is required), got {text!r}")
    factor = _DURATION_US.get(unit)
    if factor is None:
        raise UnitError(f"expected {expected}, got unknown time unit {unit!r} in {text!r}")
    return _integral(value * factor, "microsecond", text)


# The fastest rate a link may have: the flow metadata the managers exchange
# carries rates in kbit/s in 32 bits (4.29 Tbit/s), and no host shapes faster.
MAX_RATE_BPS = 4 * 10**12
# The longest latency or jitter of one link: netem holds a path's delay in
# signed 64-bit nanoseconds, and an hour per link keeps any path far inside it.
MAX_LINK_DELAY_US = 3600 * 10**6


def parse_rate_bps(text: object) -> int:
    """'10Mbps' -> 10000000; '128kbit' -> 128000 (decimal bits per second)."""
    expected = "a rate like 128Kbps, 10Mbps or 1Gbps"
    value, unit = _split(text, expected)
    if unit == "":
        raise UnitError(f"expected {expected} (a unit is required), got {text!r}")
    factor = _RATE_BPS.get(unit.lower())
    if factor is None:
        raise UnitError(f"expected {expected}, got unknown rate unit {unit!r} in {text!r}")
    bps = _integral(value * factor, "bit per second", text)
    if bps <= 0:
        raise UnitError(f"expected a rate above zero, got {text!r}")
    if bps > MAX_RATE_BPS:
        raise UnitError(f"expected a rate up to {format_rate_bps(MAX_RATE_BPS)}, got {text!r}")
    return bps


def parse_rate_or_zero(text: object) -> int:
    """A rate, or zero (`0`, `0Mbps`): a spread around a mean rate."""
    value, unit = _split(text, "a rate like 2Mbps, or 0")
    if value == 0 and (unit == "" or unit.lower() in _RATE_BPS):
        return 0
    return parse_rate_bps(text)


def parse_link_delay_us(text: object) -> int:
    """A link's latency or jitter: a duration of at most MAX_LINK_DELAY_US."""
    delay_us = parse_duration_us(text)
    if delay_us > MAX_LINK_DELAY_US:
        raise UnitError(f"expected at most {format_duration_us(MAX_LINK_DELAY_US)} per link, got {text!r}")
    return delay_us


def parse_loss_ratio(text: object) -> float:
    """'0.1%' -> 0.001; 0.001 -> 0.001; must lie in [0, 1]."""
    return _ratio(text, "a loss like 0.1% or 0.001")


def parse_probability(text: object) -> float:
    """'1%' -> 0.01; 0.01 -> 0.01: a probability per packet, in [0, 1]."""
    return _ratio(text, "a probability like 1% or 0.01")


def parse_burst(text: object) -> float:
    """A mean burst length in packets: a number of at least 1 (`3`, `2.5`)."""
    expected = "a mean burst length in packets, a number of at least 1 like 3"
    value, unit = _split(text, expected)
    if unit != "" or value < 1.0:
        raise UnitError(f"expected {expected}, got {text!r}")
    return value


def _ratio(text: object, expected: str) -> float:
    value, unit = _split(text, expected)
    if unit == "%":
        value /= 100.0
    elif unit != "":
        raise UnitError(f"expected {expected}, got unknown unit {unit!r} in {text!r}")
    if not 0.0 <= value <= 1.0:
        raise UnitError(f"expected {expected} between 0 and 100%, got {text!r}")
    return value


def parse_size_bytes(text: object) -> int:
    """'512m' -> 536870912 (Docker's binary short forms); '1GB' -> 10**9."""
    expected = "a size like 512m, 2GiB or 1GB"
    value, unit = _split(text, expected)
    factor = _SIZE_BYTES.get(unit.lower())
    if factor is None:
        raise UnitError(f"expected {expected}, got unknown size unit {unit!r} in {text!r}")
    size = _integral(value * factor, "byte", text)
    if size <= 0:
        raise UnitError(f"expected a size above zero, got {text!r}")
    return size


def format_duration_us(delay_us: int) -> str:
    """The shortest exact spelling: 10000 -> '10ms', 1500 -> '1500us'."""
    for unit, factor in (("h", 3600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1000)):
        if delay_us and delay_us % factor == 0:
            return f"{delay_us // factor}{unit}"
    return f"{delay_us}us"


def format_rate_bps(rate_bps: int) -> str:
    """The shortest exact spelling: 10**7 -> '10Mbps', 1500 -> '1500bps'."""
    for unit, factor in (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("Kbps", 10**3)):
        if rate_bps % factor == 0:
            return f"{rate_bps // factor}{unit}"
    return f"{rate_bps}bps"
