"""The end-of-run table: per instance pair that carried traffic, the
configured path next to what the eBPF counters measured."""

from __future__ import annotations

from ..model import Path


def _rate(bps: float | None) -> str:
    if bps is None:
        return "unlimited"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.0f} bit/s"


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def flow_table(flows: list[dict], configured: dict[tuple[str, str], Path | None],
               min_bytes: int = 100_000) -> list[str]:
    """Rows for flows that sent at least `min_bytes` (pings and handshakes
    say nothing about a rate).  The measured figure is the median 1 s
    average at the sender's egress while the flow was sending, in wire bits
    (what the shaper charges, Ethernet overhead included)."""
    rows = [("pair", "configured rate", "RTT", "loss", "measured (median 1 s)", "sent")]
    for flow in flows:
        if flow["bytes"] < min_bytes:
            continue
        path = configured.get((flow["src"], flow["dst"]))
        if path is None:
            cfg = ("cut", "-", "-")
        else:
            cfg = (_rate(path.rate_bps), f"{2 * path.delay_us / 1000:g} ms", f"{path.loss_ratio:.3g}")
        rows.append((f"{flow['src']} -> {flow['dst']}", *cfg, _rate(flow["median_rate_bps"]),
                     _bytes(flow["bytes"])))
    if len(rows) == 1:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
