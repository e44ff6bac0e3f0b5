"""The scenario's failures as Column expressions over a step column and a link (or path of
links) column: a handful of windows become a small OR of built-in comparisons, so no Python
runs per row. The windows and which links are durable come from simulations.world, as the
reference engine's do."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from simulations.world import LinkId, Window


@dataclass(frozen=True)
class Failures:
    """Failure windows with their links split by durability."""

    windows: tuple[tuple[int, int, tuple[LinkId, ...], tuple[LinkId, ...]], ...]
    step_ms: int

    @classmethod
    def of(cls, windows: list[Window], durable: dict[LinkId, bool], step_ms: int) -> Failures:
        return cls(
            tuple(
                (
                    w.first,
                    w.end,
                    tuple(sorted(link for link in w.links if not durable.get(link, True))),
                    tuple(sorted(link for link in w.links if durable.get(link, True))),
                )
                for w in windows
            ),
            step_ms,
        )

    def _any(self, terms: list[Column]) -> Column:
        return reduce(lambda a, b: a | b, terms, F.lit(False))

    def down(self, link: Column, step: Column) -> Column:
        """The link is down at this step."""
        return self._any(
            [
                (step >= a) & (step < b) & link.isin(*lose, *keep)
                for a, b, lose, keep in self.windows
                if lose or keep
            ]
        )

    def losing(self, link: Column, step: Column) -> Column:
        """The link is down and transient: what arrives now is lost."""
        return self._any(
            [(step >= a) & (step < b) & link.isin(*lose) for a, b, lose, _ in self.windows if lose]
        )

    def blocked(self, path: Column, step: Column) -> Column:
        """Some link of the path is losing at this step."""
        return self._any(
            [
                (step >= a) & (step < b) & F.arrays_overlap(path, F.array(*map(F.lit, lose)))
                for a, b, lose, _ in self.windows
                if lose
            ]
        )

    def through_down(self, path: Column, step: Column) -> Column:
        """Some link of the path is down at this step."""
        return self._any(
            [
                (step >= a) & (step < b) & F.arrays_overlap(path, F.array(*map(F.lit, (*lose, *keep))))
                for a, b, lose, keep in self.windows
                if lose or keep
            ]
        )

    def wait_ms(self, link: Column, step: Column) -> Column:
        """How long a durable link that is down holds what arrives now (0 if it is up)."""
        waits = [
            F.when((step >= a) & (step < b) & link.isin(*keep), (F.lit(b) - step) * self.step_ms).otherwise(0)
            for a, b, _, keep in self.windows
            if keep
        ]
        return F.greatest(F.lit(0), *waits) if waits else F.lit(0)
