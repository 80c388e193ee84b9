"""A service's `egress:` key: a token bucket over all of an instance's
traffic, as clouds shape a VM's network (traffic-shaping-icpe23 in the
papers): a committed rate and burst, optionally a peak rate with its own
burst, or the credit profile burstable instances are sold with.

Both are one token bucket (collapsar.tcal.bucket installs it as a tbf at the
root of the instance's egress, above its per-destination tree):
- `{rate: R, burst: B}`: at most B bytes at once, R on average; with
  `peak: P` (and `peak-burst`), a burst leaves at no more than P.
- `{baseline: R, burst-rate: P, credits: C}`: R for good, P while credits
  last.  Credits fill at R while the instance sends less than R and drain at
  (P - R) while it sends at P; `credits` is how long a full stock lasts at P
  (`5m`), or its size in bytes (`1GB`).  It is the same bucket: rate R,
  depth C bytes, peak P.  The bucket starts full.
"""

from __future__ import annotations

from dataclasses import dataclass

from collapsar.units import format_rate_bps


@dataclass(frozen=True)
class EgressBucket:
    """One instance's egress token bucket (bytes and bits per second)."""

    rate_bps: int  # committed rate, or a credit profile's baseline
    burst_bytes: int  # depth: the committed burst, or the credits
    peak_bps: int | None = None  # the rate a burst leaves at (None: as fast as the paths allow)
    peak_burst_bytes: int | None = None  # the peak's own bucket (None: MIN_BUCKET_BYTES)
    credits: bool = False  # written as a credit profile (for what is shown)

    def drain_s(self) -> float | None:
        """How long a full bucket lasts at the peak rate (None without a peak)."""
        if self.peak_bps is None:
            return None
        return self.burst_bytes * 8 / (self.peak_bps - self.rate_bps)

    def describe(self) -> str:
        if self.credits:
            assert self.peak_bps is not None
            return (
                f"credits: baseline {format_rate_bps(self.rate_bps)}, burst rate {format_rate_bps(self.peak_bps)}, "
                f"{self.burst_bytes} bytes of credits ({self.drain_s():.4g} s at the burst rate)"
            )
        peak = "" if self.peak_bps is None else f", peak {format_rate_bps(self.peak_bps)}"
        return f"token bucket: rate {format_rate_bps(self.rate_bps)}, burst {self.burst_bytes} bytes{peak}"
