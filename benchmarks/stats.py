"""Summary statistics and target checks shared by every benchmark kind."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["Summary", "Target", "paired_ratios", "ratio", "summarize"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Summary:
    """Median and spread of repeated measurements (in the unit of the samples)."""

    median: float
    p90: float
    minimum: float
    maximum: float
    count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "p90": self.p90,
            "min": self.minimum,
            "max": self.maximum,
            "count": self.count,
        }


def summarize(samples: Sequence[float]) -> Summary:
    """Median, p90, min and max of a non-empty sample; p90 interpolates linearly between
    closest ranks (numpy's default), and is the sample itself when there is only one."""
    if not samples:
        raise ValueError("cannot summarize an empty sample")
    # quantiles() refuses fewer than two samples.
    p90 = (
        statistics.quantiles(samples, n=10, method="inclusive")[8]
        if len(samples) > 1
        else samples[0]
    )
    return Summary(
        median=statistics.median(samples),
        p90=p90,
        minimum=min(samples),
        maximum=max(samples),
        count=len(samples),
    )


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` when either is missing or the denominator
    is not positive (a ratio against nothing is not a number to report)."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Summary | None:
    """The ratio of two measurements repeat by repeat (``numerators[i] / denominators[i]``,
    both timed in repeat ``i``), summarized: on a shared machine a load spike slows both
    sides of one repeat, so their ratio moves less than either. None when the two have no
    repeat in common or a denominator is not positive. Raises ``ValueError`` for samples of
    different lengths: they were not taken in the same repeats."""
    if len(numerators) != len(denominators):
        raise ValueError(
            f"paired samples differ in length ({len(numerators)} vs {len(denominators)}): "
            "they were not taken in the same repeats"
        )
    if not numerators or any(d <= 0 for d in denominators):
        return None
    return summarize([n / d for n, d in zip(numerators, denominators)])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """A goal the benchmark reports as met or missed; it never fails the run."""

    description: str
    #: The measured value, or ``None`` when it could not be measured in this run.
    value: float | None
    limit: float
    #: ``"<="`` (value must not exceed the limit) or ``">="``.
    comparison: str
    unit: str = ""

    def __post_init__(self) -> None:
        if self.comparison not in ("<=", ">="):
            raise ValueError(f"comparison must be '<=' or '>=', got {self.comparison!r}")

    @property
    def status(self) -> str:
        """``met``, ``missed``, or ``n/a`` when the value was not measured."""
        if self.value is None:
            return "n/a"
        met = self.value <= self.limit if self.comparison == "<=" else self.value >= self.limit
        return "met" if met else "missed"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.description,
            "value": self.value,
            "limit": f"{self.comparison} {self.limit:g}{self.unit}",
            "status": self.status,
        }
