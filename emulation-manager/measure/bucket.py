"""An instance's egress token bucket as the dashboard shows it: how full it
is now and, for a credit profile, how long its credits last at the burst
rate.

tbf does not report its tokens, only what it has sent; the bucket's level
follows from that exactly as the kernel computes it, given the start (full)
and the sent bytes between samples: tokens accrue at the rate up to the
depth, and what leaves takes them.  The bytes of a period are taken as
spent while its tokens accrued, which is exact for a sender that keeps
sending (a draining credit stock) and high by at most one sample's refill
(the rate x 1 s: the run reads the counter once a second) when a burst
follows a full bucket's idle time.  All sizes are the
kernel's frame bytes (collapsar.tcal.bucket: the rate and depth are taken
at the frame share of the wire rate), shown as the configured wire bytes.
"""

from __future__ import annotations

from collapsar.egress import EgressBucket
from collapsar.tcal.bucket import TbfParams


class BucketGauge:
    def __init__(self, bucket: EgressBucket, params: TbfParams, now_s: float, sent_bytes: int = 0):
        self.bucket, self.params = bucket, params
        self.tokens = float(params.burst_bytes)  # the kernel starts a tbf full
        self._last_s, self._last_sent = now_s, sent_bytes
        self._share = params.burst_bytes / bucket.burst_bytes if bucket.burst_bytes else 1.0
        self.stale = False  # its counter could not be read any more (the instance's namespace gone)

    def sample(self, sent_bytes: int, now_s: float) -> None:
        """What the bucket has sent in all (tbf's byte counter), now."""
        elapsed = max(0.0, now_s - self._last_s)
        spent = max(0, sent_bytes - self._last_sent)
        level = self.tokens + elapsed * self.params.rate_bytes_ps - spent
        self.tokens = min(float(self.params.burst_bytes), max(0.0, level))
        self._last_s, self._last_sent = now_s, sent_bytes

    def as_dict(self) -> dict:
        """The status row's `egress`: the configured bucket and its level now."""
        p = self.params
        fill = self.tokens / p.burst_bytes if p.burst_bytes else 0.0
        row = {
            "kind": "credits" if self.bucket.credits else "bucket",
            "rate_bps": self.bucket.rate_bps,
            "peak_bps": self.bucket.peak_bps,
            "depth_bytes": self.bucket.burst_bytes,
            "tokens_bytes": round(self.tokens / self._share),
            "fill": round(fill, 4),
            "stale": self.stale,
        }
        if self.bucket.credits and p.peak_bytes_ps > p.rate_bytes_ps:
            # Credits drain at (burst rate - baseline) while the instance sends at its burst rate.
            row["credits_s"] = round(self.tokens / (p.peak_bytes_ps - p.rate_bytes_ps), 3)
        return row
