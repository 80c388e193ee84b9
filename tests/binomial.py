"""Bands for counts of independent events (a packet lost, a packet copied),
shared by the root tiers: the central range a correct implementation stays
inside except with probability `odds` (half on each side)."""

from __future__ import annotations

import math

FALSE_FAIL_ODDS = 1e-4


def binomial_band(n: int, p: float, odds: float = FALSE_FAIL_ODDS) -> tuple[int, int]:
    """(low, high): counts of successes out of `n` trials at probability `p`."""
    log_p, log_q = math.log(p), math.log1p(-p)

    def pmf(k: int) -> float:
        return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)

    low, tail = 0, 0.0
    while tail + pmf(low) <= odds / 2:
        tail += pmf(low)
        low += 1
    high, tail = n, 0.0
    while tail + pmf(high) <= odds / 2:
        tail += pmf(high)
        high -= 1
    return low, high
