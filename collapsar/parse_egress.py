"""The `egress:` key of a service, read into a `collapsar.egress.EgressBucket`."""

from __future__ import annotations

from collapsar import parse_common as pc
from collapsar.egress import EgressBucket
from collapsar.errors import UnitError
from collapsar.parse_common import Report
from collapsar.units import format_rate_bps, parse_duration_us, parse_rate_bps, parse_size_bytes
from collapsar.yamlsrc import Node

BUCKET_KEYS = ("rate", "burst", "peak", "peak-burst")
CREDIT_KEYS = ("baseline", "burst-rate", "credits")
# The kernel holds a tbf's depth in 32 bits of bytes.
MAX_BUCKET_BYTES = 2**32 - 1
# A bucket must hold a full frame (1500-byte MTU) with Ethernet's wire overhead.
MIN_BUCKET_BYTES = 1538
_EXPECTED = (
    "a token bucket like {rate: 50Mbps, burst: 64KiB} "
    "or credits like {baseline: 10Mbps, burst-rate: 50Mbps, credits: 5m}"
)


def read_egress(report: Report, node: Node, label: str) -> EgressBucket | None:
    """The `egress:` mapping of a service; None (reported) if it is not valid."""
    if not node.is_mapping or not node.value:
        report.add(node.line, f"{label}: expected {_EXPECTED}, got {pc.describe(node)}")
        return None
    credits = any(key in node.value for key in CREDIT_KEYS)
    other = [key for key in (BUCKET_KEYS if credits else ()) if key in node.value]
    if other:
        report.add(
            node.value[other[0]].line,
            f"{label}: use either rate and burst (a token bucket) or baseline, burst-rate and credits, not both",
        )
        return None
    pc.check_keys(report, node, CREDIT_KEYS if credits else BUCKET_KEYS, label)
    required = ("baseline", "burst-rate", "credits") if credits else ("rate", "burst")
    missing = [key for key in required if key not in node.value]
    if missing:
        report.add(node.line, f"{label}: {missing[0]} is missing (expected {_EXPECTED})")
        return None
    return _credits(report, node, label) if credits else _bucket(report, node, label)


def _bucket(report: Report, node: Node, label: str) -> EgressBucket | None:
    rate = pc.unit(report, node.value["rate"], f"{label}: rate", parse_rate_bps)
    burst = _size(report, node.value["burst"], f"{label}: burst")
    peak = peak_burst = None
    if "peak" in node.value:
        peak = pc.unit(report, node.value["peak"], f"{label}: peak", parse_rate_bps)
        if peak is not None and rate is not None and peak <= rate:
            report.add(node.value["peak"].line, f"{label}: peak must be above the rate ({format_rate_bps(rate)})")
            return None
    if "peak-burst" in node.value:
        if "peak" not in node.value:
            report.add(node.value["peak-burst"].line, f"{label}: peak-burst needs a peak")
            return None
        peak_burst = _size(report, node.value["peak-burst"], f"{label}: peak-burst")
        if peak_burst is None:
            return None
    if rate is None or burst is None or ("peak" in node.value and peak is None):
        return None
    return EgressBucket(rate, burst, peak, peak_burst)


def _credits(report: Report, node: Node, label: str) -> EgressBucket | None:
    baseline = pc.unit(report, node.value["baseline"], f"{label}: baseline", parse_rate_bps)
    burst_rate = pc.unit(report, node.value["burst-rate"], f"{label}: burst-rate", parse_rate_bps)
    if baseline is None or burst_rate is None:
        return None
    if burst_rate <= baseline:
        report.add(
            node.value["burst-rate"].line,
            f"{label}: burst-rate must be above the baseline ({format_rate_bps(baseline)})",
        )
        return None
    item = node.value["credits"]
    try:
        # How long a full stock lasts at the burst rate: it drains at burst-rate - baseline.
        depth = (burst_rate - baseline) * parse_duration_us(item.value) // 8_000_000
    except UnitError:
        size = _size(report, item, f"{label}: credits", expected="a time at the burst rate like 5m, or a size like 1GB")
        if size is None:
            return None
        depth = size
    if not MIN_BUCKET_BYTES <= depth <= MAX_BUCKET_BYTES:
        report.add(item.line, f"{label}: credits: {depth} bytes; expected {MIN_BUCKET_BYTES} to {MAX_BUCKET_BYTES}")
        return None
    return EgressBucket(baseline, depth, burst_rate, None, credits=True)


def _size(report: Report, node: Node, label: str, expected: str = "a size like 64KiB") -> int | None:
    try:
        size = parse_size_bytes(node.value) if node.is_scalar else None
    except UnitError:
        size = None
    if size is None:
        report.add(node.line, f"{label}: expected {expected}, got {pc.describe(node)}")
        return None
    if not MIN_BUCKET_BYTES <= size <= MAX_BUCKET_BYTES:
        report.add(
            node.line,
            f"{label}: expected {MIN_BUCKET_BYTES} bytes to 4GiB (a full frame to the kernel's most), got {size}",
        )
        return None
    return size
