"""The scenario's failures as Column expressions over a step column and a link (or path of
links) column: a handful of windows become a small OR of built-in comparisons, so no Python
runs per row. The windows and which links are durable come from simulations.world, as the
reference engine's do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from simulations.holding import Cuts
from simulations.world import LinkId, Window, World


def dead(world: World, node: Column, step: Column) -> Column:
    """The node is dead at this step (simulations.world.World.dead_steps): its publishers'
    messages are refused."""
    killed = sorted({failure.node for failure in world.scenario.failures if failure.node is not None})
    terms = [
        (node == name) & (step >= first) & (step < end)
        for name in killed
        for first, end in world.dead_steps(name)
    ]
    return reduce(lambda a, b: a | b, terms, F.lit(False))


@dataclass(frozen=True)
class Failures:
    """Failure windows with their links split into those that lose what arrives (transient
    and dropped) and those that keep it (durable, or stalled: simulations.world.Window); what
    a link holding copies drops (simulations.holding): its full queue's cuts (link, first
    step, end step) and the steps its source is killed at (link, step)."""

    windows: tuple[tuple[int, int, tuple[LinkId, ...], tuple[LinkId, ...]], ...]
    step_ms: int
    #: The run's steps: a window ends at `steps` at the latest.
    steps: int
    cuts: tuple[tuple[LinkId, int, int], ...] = ()
    kills: tuple[tuple[LinkId, int], ...] = ()
    #: The links whose held copies may expire (simulations.holding.expiring_links).
    expiring: tuple[LinkId, ...] = ()

    @classmethod
    def of(
        cls,
        windows: list[Window],
        durable: dict[LinkId, bool],
        step_ms: int,
        steps: int,
        cuts: Cuts | None = None,
        kills: dict[LinkId, list[int]] | None = None,
        expiring: Iterable[LinkId] = (),
    ) -> Failures:
        return cls(
            tuple(
                (
                    w.first,
                    w.end,
                    tuple(sorted(link for link in w.links if not (w.kept or durable.get(link, True)))),
                    tuple(sorted(link for link in w.links if w.kept or durable.get(link, True))),
                )
                for w in windows
            ),
            step_ms,
            steps,
            tuple((link, first, cut) for link, spans in sorted((cuts or {}).items()) for first, cut in spans),
            tuple((link, step) for link, steps_ in sorted((kills or {}).items()) for step in steps_),
            tuple(sorted(expiring)),
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

    def release(self, link: Column, step: Column) -> Column:
        """The step what reaches the link at `step` crosses it at: the end of its window if it
        is down and keeps what arrives, else `step` (a link is in one window at a time)."""
        found = step.cast("bigint")
        for a, b, _, keep in self.windows:
            if keep:
                found = F.when(
                    (step >= a) & (step < b) & link.isin(*keep), F.lit(b).cast("bigint")
                ).otherwise(found)
        return found

    def dropped(self, link: Column, step: Column, persistent: Column | None, ttl_ms: Column | None) -> Column:
        """The link holds what reaches it at `step` and drops this copy before it is back, as
        simulations.world.Outages.dropped: a cut, the TTL (`ttl_ms`, -1: none) where the link's
        queue applies it, or its source
        killed while it holds a copy that is not `persistent` (None: persistent, no TTL)."""
        release = self.release(link, step)
        terms = [(link == name) & (step >= a) & (step < b) for name, a, b in self.cuts]
        if ttl_ms is not None and self.expiring:
            terms.append(link.isin(*self.expiring) & (ttl_ms >= 0) & (self.wait_ms(link, step) > ttl_ms))
        if persistent is not None:
            terms += [
                ~persistent & (link == name) & (step < first) & (release > first)
                for name, first in self.kills
            ]
        return (release > step) & self._any(terms) if terms else F.lit(False)

    def walk(
        self, path: Column, step: Column, persistent: Column | None = None, ttl_ms: Column | None = None
    ) -> Column:
        """A copy published at `step` along `path`, as simulations.world.Outages.walk: a struct
        of `after` (the step it is past the path at), `lost` (or dropped) and `through_down`;
        the message is `persistent`, with a TTL of `ttl_ms` (-1; None: persistent, no TTL)."""

        def cross(walked: Column, link: Column) -> Column:
            at = walked["after"]
            lost = walked["lost"] | self.losing(link, at) | self.dropped(link, at, persistent, ttl_ms)
            return F.struct(
                F.when(lost, at).otherwise(self.release(link, at)).alias("after"),
                lost.alias("lost"),
                (walked["through_down"] | (~lost & self.down(link, at))).alias("through_down"),
            )

        start = F.struct(
            step.cast("bigint").alias("after"), F.lit(False).alias("lost"), F.lit(False).alias("through_down")
        )
        # Outside every window (most steps) the walk changes nothing: not worked out there.
        return F.when(self.failing(step), F.aggregate(path, start, cross)).otherwise(start)

    def withdrawn(self, path: Column, gates: Column, step: Column) -> Column:
        """A copy published at `step` that would take `path` is not sent along all of it, by
        its `gates` (null: none), as simulations.world.Outages.withdrawn."""

        def closed(gate: Column) -> Column:
            at = self.walk(F.slice(path, F.lit(1), gate["position"]), step)["after"]
            return F.forall(gate["leaves"], lambda leaf: self.unbound(leaf, at))

        found = F.when(self.failing(step) & gates.isNotNull(), F.exists(gates, closed))
        return F.coalesce(found, F.lit(False))

    def unbound(self, leaf: Column, step: Column) -> Column:
        """The binding behind the leaf's last link is gone as the node at its start sees it at
        `step` (simulations.world.Outages.unbound)."""
        hops = F.slice(leaf, F.lit(1), F.size(leaf) - 1)
        seen = F.aggregate(hops, step.cast("bigint"), lambda at, hop: self.last_up(hop, at))
        return (seen >= 0) & self.losing(F.element_at(leaf, -1), seen)

    def last_up(self, link: Column, step: Column) -> Column:
        """The last step at or before `step` at which the link is up (-1: none)."""
        found = step.cast("bigint")
        for a, b, lose, keep in self.windows:
            if lose or keep:
                found = F.when(
                    (step >= a) & (step < b) & link.isin(*lose, *keep), F.lit(a - 1).cast("bigint")
                ).otherwise(found)
        return found

    def arrivals(self, path: Column, step: Column) -> Column:
        """The step a copy published at `step` reaches each link of `path` at."""
        walked = F.transform(path, lambda _, index: self.walk(F.slice(path, 1, index), step)["after"])
        return F.when(self.failing(step), walked).otherwise(F.array_repeat(step.cast("bigint"), F.size(path)))

    def failing(self, step: Column) -> Column:
        """Some window is open at this step."""
        return self._any([(step >= a) & (step < b) for a, b, lose, keep in self.windows if lose or keep])

    def wait_ms(self, link: Column, step: Column) -> Column:
        """How long a durable link that is down holds what arrives now (0 if it is up)."""
        waits = [
            F.when((step >= a) & (step < b) & link.isin(*keep), (F.lit(b) - step) * self.step_ms).otherwise(0)
            for a, b, _, keep in self.windows
            if keep
        ]
        return F.greatest(F.lit(0), *waits) if waits else F.lit(0)
