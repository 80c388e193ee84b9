"""The end-of-run table: per instance pair that carried traffic, the
configured path next to what the eBPF counters measured."""

from __future__ import annotations

from collapsar.model import Path


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


def _span(segment: dict) -> str:
    end = segment["end_s"]
    return f"{segment['start_s']:.1f}-{'end' if end is None else f'{end:.1f}'} s"


SHARE_BELOW = 0.99  # a share under this fraction of the path's rate is what limited the flow


def limited_by(segment: dict) -> str:
    """What capped the flow in a segment: the share the sharing loop gave it
    (other flows on a link of its path took the rest), or its path's rate,
    or nothing ("-": an unlimited path, no share)."""
    if segment["cut"]:
        return "cut"
    share, path = segment.get("median_share_bps"), segment["configured_bps"]
    if share is not None and (path is None or share < SHARE_BELOW * path):
        return "its share"
    return "its path" if path is not None else "-"


def flow_table(
    flows: list[dict], configured: dict[tuple[str, str], Path | None], min_bytes: int = 100_000
) -> list[str]:
    """Rows for flows that sent at least `min_bytes` (pings and handshakes
    say nothing about a rate), one per segment of the run in which the
    pair's configured rate held and the flow sent for a whole window.  The
    measured figure is the median 1 s average at the sender's egress within
    that segment, in wire bits (what the shaper charges, Ethernet overhead
    included); the share is the median of what the pair's class allowed at
    the end of those windows (the path's rate, or less where the sharing
    loop divided a link among flows), and `limited by` says which of the two
    capped it.  RTT and loss are the path's at the end of the run."""
    rows = [
        (
            "pair",
            "during",
            "configured rate",
            "share (median)",
            "measured (median 1 s)",
            "limited by",
            "RTT now",
            "loss now",
            "sent",
        )
    ]
    for flow in flows:
        if flow["bytes"] < min_bytes:
            continue
        path = configured.get((flow["src"], flow["dst"]))
        now = ("cut", "-") if path is None else (f"{2 * path.delay_us / 1000:g} ms", f"{path.loss_ratio:.3g}")
        pair, sent = f"{flow['src']} -> {flow['dst']}", _bytes(flow["bytes"])
        for segment in flow.get("segments", ()):
            if not segment["windows"]:
                continue
            cut = segment["cut"]
            rate = "cut" if cut else _rate(segment["configured_bps"])
            share = "-" if cut else _rate(segment.get("median_share_bps"))
            measured = _rate(segment["median_rate_bps"])
            rows.append((pair, _span(segment), rate, share, measured, limited_by(segment), *now, sent))
            pair, now, sent = "", ("", ""), ""  # the pair's first row names it
    if len(rows) == 1:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
