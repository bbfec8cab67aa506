"""Paired A/B statistics: variants measured by turns, so that the machine's drifting load
hits each alike, and compared pair by pair."""

from __future__ import annotations

import math
import statistics

Z95 = statistics.NormalDist().inv_cdf(0.975)


def interval(differences: list[float]) -> tuple[float, float]:
    """The mean of ``differences`` and the half-width of its 95 % confidence interval.

    >>> mean, half = interval([1.0, 3.0])
    >>> mean, round(half, 2)
    (2.0, 1.96)
    """
    return statistics.fmean(differences), Z95 * statistics.stdev(differences) / math.sqrt(len(differences))


def difference(plain: list[float], other: list[float]) -> str:
    """``other - plain``, phase by phase: ``"mean ± 95 % half-width"``.

    >>> difference([1.0, 2.0], [2.0, 5.0])
    '+2 ± 2'
    """
    mean, half = interval([b - a for a, b in zip(plain, other)])
    return f"{mean:+.0f} ± {half:.0f}"


def paired_ratio(plain: list[float], instrumented: list[float]) -> dict:
    """The geometric mean of the pairs' throughput ratios, with its 95 % confidence interval
    (the normal approximation over the pairs' log ratios) and the median pair ratio."""
    logs = [math.log(b / a) for a, b in zip(plain, instrumented)]
    mean, half = interval(logs)
    return {"ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half),
            "median": statistics.median(math.exp(x) for x in logs)}


def rotation(names, round_: int) -> list:
    """The order of the variants in round ``round_``: each goes first in turn.

    >>> rotation(["a", "b", "c"], 1)
    ['b', 'c', 'a']
    """
    names = list(names)
    shift = round_ % len(names)
    return names[shift:] + names[:shift]
