"""An instance's egress token bucket (collapsar.egress) as the kernel holds it.

A tbf at the root of the egress interface, the htb tree (collapsar.tcal.plan)
its only child: every packet the instance sends passes the per-destination
shaping first (its class, its netem), then the bucket, which holds it until
there are tokens for it.  So the bucket sees what the paths let through, as
a cloud's per-VM shaper sees what the VM sends, and a path's own rate and
delay stay what they are.

The numbers follow the htb classes' (plan.HtbCalculator): with wire overhead
the rate is the frame share of the wire rate and a minimum frame costs its
84 wire bytes, so `rate: 10Mbps` carries what a 10 Mbit/s link carries; the
sizes (burst, credits) are wire bytes too, taken at the same share, so that
credits of `4s` at the burst rate last 4 s.  The
bucket's depth is sent in bytes (TCA_TBF_BURST: 32 bits, so buckets beyond
the 4.3 s a tick-based buffer can hold work), and so is the peak's.  The
kernel starts a tbf with a full bucket.

A tbf with a peak rate needs a peak bucket of at least a frame: PEAK_BURST
(two full frames) unless the experiment says otherwise; a larger packet
(GSO) is split by tbf into segments that fit.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from collapsar.egress import EgressBucket
from collapsar.tcal.layout import QUEUE_MAJOR_BASE, classid, format_handle
from collapsar.tcal.nlmsg import TCA_OPTIONS, attr, u64_attr
from collapsar.tcal.plan import PSCHED_TICK_NS, HtbCalculator

# The tbf's handle, 8000:, the queue major of minor 0, which no class takes
# (collapsar.tcal.layout); the htb tree hangs from 8000:1.
BUCKET_MAJOR = QUEUE_MAJOR_BASE
BUCKET_HANDLE = classid(BUCKET_MAJOR, 0)
TREE_PARENT = classid(BUCKET_MAJOR, 1)
PEAK_BURST_FRAMES = 2
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_PRATE64, TCA_TBF_BURST, TCA_TBF_PBURST = 1, 4, 5, 6, 7
TC_LINKLAYER_ETHERNET = 1
_RATESPEC = "BBHhHI"  # cell_log, linklayer, overhead, cell_align, mpu, rate (bytes/s)
_TBF_QOPT = struct.Struct("=" + _RATESPEC + _RATESPEC + "III")  # + limit, buffer, mtu (ticks)
U32_MAX = 0xFFFFFFFF


class TbfParams(NamedTuple):
    """The tbf, in the kernel's units."""

    rate_bytes_ps: int
    burst_bytes: int
    peak_bytes_ps: int  # 0: no peak
    peak_burst_bytes: int
    mpu_bytes: int


def tbf_params(bucket: EgressBucket, *, wire_overhead: bool, mtu_bytes: int = 1500) -> TbfParams:
    # The htb classes' constants, so the bucket's rate means what a link's does.
    htb = HtbCalculator(wire_overhead=wire_overhead, mtu_bytes=mtu_bytes)
    frame, share, mpu = htb.frame, htb.share, htb.mpu
    peak = 0 if bucket.peak_bps is None else round(bucket.peak_bps * share / 8)
    # Sizes count wire bytes as rates do: the kernel counts frames.
    burst = max(frame, round(bucket.burst_bytes * share))
    peak_burst = (
        max(frame, round(bucket.peak_burst_bytes * share)) if bucket.peak_burst_bytes else PEAK_BURST_FRAMES * frame
    )
    return TbfParams(round(bucket.rate_bps * share / 8) or 1, burst, peak, peak_burst if peak else 0, mpu)


def describe(p: TbfParams) -> str:
    peak = f", peak {p.peak_bytes_ps} B/s burst {p.peak_burst_bytes} B" if p.peak_bytes_ps else ""
    return (
        f"qdisc {BUCKET_MAJOR:x}: root tbf (egress token bucket): rate {p.rate_bytes_ps} B/s, "
        f"burst {p.burst_bytes} B{peak}, mpu {p.mpu_bytes} B; the tree below is its child "
        f"(parent {format_handle(TREE_PARENT)})"
    )


def _ticks(size_bytes: int, rate_bytes_ps: int) -> int:
    return min(U32_MAX, -(-size_bytes * 10**9 // (rate_bytes_ps * PSCHED_TICK_NS)))


def tbf_options(p: TbfParams) -> bytes:
    """TCA_OPTIONS of the tbf: its qopt (rates above 4 GB/s in the 64-bit
    attributes), then the depths in bytes, which the kernel takes over the
    qopt's tick counts.  limit 0: no fifo of its own (its child is the tree)."""
    rate32, peak32 = min(p.rate_bytes_ps, U32_MAX), min(p.peak_bytes_ps, U32_MAX)
    buffer = _ticks(p.burst_bytes, p.rate_bytes_ps)
    mtu = _ticks(p.peak_burst_bytes, p.peak_bytes_ps) if p.peak_bytes_ps else 0
    qopt = _TBF_QOPT.pack(
        0, TC_LINKLAYER_ETHERNET, 0, 0, p.mpu_bytes, rate32,
        0, TC_LINKLAYER_ETHERNET if p.peak_bytes_ps else 0, 0, 0, p.mpu_bytes if p.peak_bytes_ps else 0, peak32,
        0, buffer, mtu,
    )  # fmt: skip
    attrs = attr(TCA_TBF_PARMS, qopt) + attr(TCA_TBF_BURST, struct.pack("=I", p.burst_bytes))
    if p.rate_bytes_ps > U32_MAX:
        attrs += u64_attr(TCA_TBF_RATE64, p.rate_bytes_ps)
    if p.peak_bytes_ps:
        attrs += attr(TCA_TBF_PBURST, struct.pack("=I", p.peak_burst_bytes))
        if p.peak_bytes_ps > U32_MAX:
            attrs += u64_attr(TCA_TBF_PRATE64, p.peak_bytes_ps)
    return attr(TCA_OPTIONS, attrs)
