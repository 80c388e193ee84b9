"""netem jitter distribution tables, generated from the math.

netem draws a delay as `delay + jitter * t / NETEM_DIST_SCALE` where `t` is a
uniformly chosen entry of a table of signed 16-bit values.  A table is
therefore the inverse CDF of a zero-mean, unit-deviation distribution sampled
at evenly spaced probabilities, scaled by NETEM_DIST_SCALE (8192).  Values
beyond +/-4 deviations do not fit an s16 and are held at its bounds: only the
pareto tails reach that far (about 1% of a pareto table), so those tables are
re-standardised after holding.  Uniform is netem's own: delay +/- jitter.

We always send a table, uniform included: the kernel keeps the previous table
when a change carries none, so switching a path back to uniform in place is
only possible by sending a uniform table.
"""

from __future__ import annotations

import functools
import math
import statistics
import struct
from collections.abc import Callable

from collapsar.model import JitterDistribution

NETEM_DIST_SCALE = 8192
TABLE_SIZE = 4096  # netem accepts up to 16384 entries; 4096 keeps a message at 8 KB
PARETO_ALPHA = 3.0  # the heavy tail netem users expect; alpha > 2 keeps the variance finite
PARETONORMAL_PARETO_WEIGHT = 0.75  # 1/4 normal + 3/4 pareto, then standardised
_S16 = (-32768, 32767)


def _probabilities(size: int) -> list[float]:
    return [(i + 0.5) / size for i in range(size)]


def normal_quantiles(size: int = TABLE_SIZE) -> list[float]:
    dist = statistics.NormalDist()
    return [dist.inv_cdf(p) for p in _probabilities(size)]


def _pareto_moments(alpha: float) -> tuple[float, float]:
    mean = alpha / (alpha - 1)
    std = math.sqrt(alpha / ((alpha - 1) ** 2 * (alpha - 2)))
    return mean, std


def pareto_quantiles(size: int = TABLE_SIZE, alpha: float = PARETO_ALPHA) -> list[float]:
    """Pareto(x_m = 1, alpha): F^-1(p) = (1 - p)^(-1/alpha), standardised."""
    mean, std = _pareto_moments(alpha)
    return [((1 - p) ** (-1 / alpha) - mean) / std for p in _probabilities(size)]


def paretonormal_quantiles(size: int = TABLE_SIZE, grid: int = 1024) -> list[float]:
    """Quantiles of w*P + (1-w)*N (P standardised pareto, N standard normal),
    rescaled to unit variance.  The sum has no closed-form CDF: we take the
    pareto CDF exactly and integrate it against the normal density on a grid
    (P(S <= s) = E_N[F_P((s - (1-w) N) / w)]), then invert by interpolation."""
    import numpy as np  # only this table needs it; kept out of the import path

    w = PARETONORMAL_PARETO_WEIGHT
    mean, std = _pareto_moments(PARETO_ALPHA)
    step = 16.0 / grid  # midpoint rule over +/-8 normal deviations
    nodes = -8.0 + (np.arange(grid) + 0.5) * step
    weights = np.exp(-(nodes**2) / 2) / math.sqrt(2 * math.pi) * step
    ss = np.linspace(-6.0, 40.0, 2301)
    raw = ((ss[:, None] - (1 - w) * nodes[None, :]) / w) * std + mean
    pareto_cdf = np.where(raw <= 1.0, 0.0, 1.0 - np.maximum(raw, 1.0) ** -PARETO_ALPHA)
    cdf = pareto_cdf @ weights
    cdf = np.maximum.accumulate(cdf)  # guard interpolation against rounding wiggles
    quantiles = np.interp(np.array(_probabilities(size)), cdf, ss)
    scale = math.sqrt(w * w + (1 - w) ** 2)
    return list(quantiles / scale)


def uniform_quantiles(size: int = TABLE_SIZE) -> list[float]:
    """Uniform on [-1, 1] (netem's own uniform: delay +/- jitter), not unit variance."""
    return [2 * p - 1 for p in _probabilities(size)]


_QUANTILES: dict[JitterDistribution, Callable[[], list[float]]] = {  # one per model.DISTRIBUTIONS
    "normal": normal_quantiles,
    "pareto": pareto_quantiles,
    "paretonormal": paretonormal_quantiles,
    "uniform": uniform_quantiles,
}


def _to_s16(quantiles: list[float]) -> list[int]:
    return [min(max(round(q * NETEM_DIST_SCALE), _S16[0]), _S16[1]) for q in quantiles]


def _restandardise(quantiles: list[float], rounds: int = 30) -> list[float]:
    """Holding the tail at 4 deviations shrinks a pareto table's deviation to about
    0.74: re-centre and re-scale the held table until its own mean is 0 and its
    deviation 1, so `jitter_us` is the deviation the packets actually see."""
    held = quantiles
    for _ in range(rounds):
        held = [min(max(q, _S16[0] / NETEM_DIST_SCALE), _S16[1] / NETEM_DIST_SCALE) for q in held]
        mean = statistics.fmean(held)
        std = statistics.pstdev(held)
        held = [(q - mean) / std for q in held]
    return held


@functools.cache
def table_values(distribution: JitterDistribution) -> tuple[int, ...]:
    quantiles = _QUANTILES[distribution]()
    if distribution != "uniform":
        quantiles = _restandardise(quantiles)
    return tuple(_to_s16(quantiles))


@functools.cache
def table_bytes(distribution: JitterDistribution) -> bytes:
    """The TCA_NETEM_DELAY_DIST payload: native-endian s16 values."""
    values = table_values(distribution)
    return struct.pack(f"={len(values)}h", *values)
