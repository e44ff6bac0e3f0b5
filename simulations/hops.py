"""Publishes on a plain forest routed in aggregate, per tree link and per (node, key), never
per class and path (issue 13: regions-10k has 2.8 million classes reaching 3,400 nodes each).

On a `topology.flow.PlainForest` a message with key k published at node o crosses exactly the
tree links on the paths from o to the nodes M(k) the key matches, and each node m it reaches
(o included) delivers it to its queues matching k by the tree path from o to m. So:

- link v->p (v a child of p) carries what the nodes below v publish with a key some node not
  below v matches; link p->v what the nodes not below v publish with a key some node below v
  matches ("below" from subtree counts of M(k) in breadth-first order);
- a copy is lost at a link down and transient, so a link carries only copies whose tree path
  before it has no such link, and a queue loses what it would get by such a path;
- a copy reaching a link that is down and holds it (durable, or stalled) goes on when the link
  comes back: the links after it see it at that step (simulations.world.Outages.walk), so
  copies are kept apart by the step they are at, and a step's link states are worked out for
  every step its copies reach (`LinkArray`);
- hops and delay of a delivery o->m are the tree path's length and the sum of its links'
  latency plus queueing delay, each at the step the copy reaches it; a delivery is delayed if
  a (durable) link of the path was down.

All of these are sums over sources of per-(node, key) counts, pushed along the tree one depth
at a time: up from the leaves (what reaches v from below, itself included) and then down (what
reaches v from everywhere: what reached its parent, less what came from v, over the link p->v),
per step (failures and delays change by step), in numpy arrays of nodes x keys. Deliveries keep
their copies apart by "bin" (hops, delay, through a down link), which a link shifts by one hop
and its delay. tests/spark/test_hop_routing.py holds the reference engine's tables computed this
way equal to those of routing every class by its paths.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import numpy as np

from simulations.outcomes import Outcomes
from simulations.scenario import KeySpace
from simulations.workload import headers_of, routing_key
from simulations.world import LinkId, link_id
from topology.flow import PlainForest

#: Copies told apart at a queue: (hops, delay in ms, through a link that was down).
Bin = tuple[int, int, bool]
Bins = dict[Bin, np.ndarray]
#: Told the share of a tree's steps worked so far (the reference engine's progress).
Done = Callable[[float], None]
#: Copies told apart on the way: a bin and the step they are at (its number in
#: `LinkArray.times`).
Place = tuple[int, int, bool, int]
ORIGIN: Place = (0, 0, False, 0)
Places = dict[Place, np.ndarray]
#: A link's columns in a LinkArray, per step: passes, delay in ms, down, and the number of the
#: step what reaches it goes on at.
WIDTH = 4


class LinkStates(Protocol):
    """Which links are down when (the reference engine's failures)."""

    def down(self, link: LinkId, step: int) -> bool: ...

    def losing(self, link: LinkId, step: int) -> bool: ...

    def release(self, link: LinkId, step: int) -> int: ...

    def down_links(self, step: int) -> frozenset[LinkId]:
        """Every link `down` says is down at this step."""
        ...


#: Per step, each node's link up's and link down's latency plus queueing delay in ms, as two
#: arrays by node number (the root's entries unused).
Delays = Callable[[int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class LinkArray:
    """Per node (but the roots), its link up and its link down at each of `times`: the step
    worked out for and every step a copy held by a link that is down goes on at (WIDTH
    columns per link, the link up first, 2 x WIDTH per step)."""

    times: tuple[int, ...]
    table: np.ndarray


def _state(row: tuple[int, ...], time: int, side: int) -> tuple[int, ...]:
    """A link's WIDTH columns at the step numbered `time` (side 0: up, WIDTH: down)."""
    start = time * 2 * WIDTH + side
    return row[start : start + WIDTH]


@cache
def _reuse_freed_arrays() -> None:
    """Have glibc keep freed blocks of up to 1 GiB for the next allocation instead of handing
    them back to the kernel (M_MMAP_THRESHOLD -3, M_TRIM_THRESHOLD -1 of mallopt). By default
    it maps every block over 32 MB afresh and unmaps it on free, so each step's node x key
    arrays came back as new zeroed pages: at regions-10k's size (10,000 nodes x 1,000 keys) one
    step's deliveries took 1.1 s, 0.8 s of it in the kernel, and 0.35 s with the blocks kept.
    The process keeps its peak size. Other C libraries are left as they are."""
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is not None:
        mallopt(-3, 1 << 30)
        mallopt(-1, 1 << 31)


@dataclass(frozen=True)
class TreeShape:
    """A tree of a plain forest as TreeTraffic walks it: its nodes in breadth-first order, each
    one's number and parent's number (-1: the root), each depth's run [start, end) of numbers,
    and each node's link up to its parent and down from it ("" at the root). The same for
    every run of keys, so the Spark engine's workers make it once per tree (at 100,000 nodes
    it took 1.4 s of the 3.6 s a run's TreeTraffic took)."""

    nodes: list[str]
    index: dict[str, int]
    parent: np.ndarray
    levels: list[tuple[int, int]]
    up_links: list[LinkId]
    down_links: list[LinkId]
    #: Each link's node number and its columns' start in a LinkArray (0: up, WIDTH: down).
    place: dict[LinkId, tuple[int, int]]

    @classmethod
    def of(cls, forest: PlainForest, tree: int) -> TreeShape:
        order = forest.trees[tree]
        nodes = [node for node, _ in order]
        index = {node: number for number, node in enumerate(nodes)}
        parent = np.array([-1 if parent is None else index[parent] for _, parent in order])
        depth = [0] * len(order)
        for number in range(1, len(order)):
            depth[number] = depth[parent[number]] + 1
        levels = [(depth.index(d), len(depth) - depth[::-1].index(d)) for d in range(max(depth) + 1)]
        ups = [link_id(node, nodes[p]) if p >= 0 else "" for node, p in zip(nodes, parent, strict=True)]
        downs = [link_id(nodes[p], node) if p >= 0 else "" for node, p in zip(nodes, parent, strict=True)]
        place = {link: (number, 0) for number, link in enumerate(ups) if link}
        place |= {link: (number, WIDTH) for number, link in enumerate(downs) if link}
        return cls(nodes, index, parent, levels, ups, downs, place)


class TreeTraffic:
    """The publishes of one exchange on one tree of its plain forest, by (node, key, step)."""

    def __init__(
        self,
        forest: PlainForest,
        tree: int,
        keys: KeySpace,
        chunk: range | None = None,
        shape: TreeShape | None = None,
    ) -> None:
        _reuse_freed_arrays()
        shape = TreeShape.of(forest, tree) if shape is None else shape
        self.nodes, self.index, self.parent = shape.nodes, shape.index, shape.parent
        #: Each depth's nodes, a run [start, end) in breadth-first order.
        self.levels = shape.levels
        self.up_links, self.down_links, self.place = shape.up_links, shape.down_links, shape.place
        #: The keys covered, a run of key numbers (None: all of them). Every array is nodes x
        #: these keys and no key's sums touch another's, so traffic split by runs of keys adds
        #: up to the whole (the Spark engine's tasks each take one run of a large tree).
        self.chunk = range(keys.size) if chunk is None else chunk
        matched = np.zeros((len(self.nodes), len(self.chunk)), dtype=np.int64)
        queue_keys: dict[tuple[str, str], list[int]] = defaultdict(list)
        for column, key in enumerate(self.chunk):
            message = (routing_key(keys, key), headers_of(keys, key))
            matched[[self.index[node] for node in forest.matched(tree, *message)], column] = 1
            for pair in forest.queues(tree, *message):
                queue_keys[pair].append(column)
        #: Per node and key: some node of M(k) is below it (itself included), or not below it.
        inside = self._up_sum(matched)
        self.below = (inside > 0).astype(np.int64)
        self.above = (inside[0] - inside > 0).astype(np.int64)
        self.pairs = sorted(queue_keys)
        self.pair_node = np.array([self.index[node] for node, _ in self.pairs], dtype=np.int64)
        self.queue_keys = np.zeros((len(self.pairs), len(self.chunk)), dtype=np.int64)
        for number, pair in enumerate(self.pairs):
            self.queue_keys[number, queue_keys[pair]] = 1
        self.keys = len(self.chunk)
        #: Per step, cells added since the step's array was last made, then the array alone
        #: (a list of tuples holds about 2.5 times its array's bytes; regions-10k's reference
        #: run peaked at 5.7 GB with both kept, 4.8 GB with the array alone).
        self._pending: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
        self._arrays: dict[int, np.ndarray] = {}
        self._total: np.ndarray | None = None

    def add(self, node: str, key: int, step: int, messages: int, size: int) -> None:
        """Publishes of one (node, key, step), counted (the reference engine's way in: it runs
        every step at once; the Spark engine calls the per-step methods on each group)."""
        self._pending[step].append((self.index[node], key, messages, size))
        self._total = None

    # -- the whole run, from the counted cells (the reference engine) ---------------------------

    def crossed(self) -> list[LinkId]:
        """The links some publish crosses (at any step, lost or not)."""
        return self.crossed_by(self._totals())

    def unrouted(self) -> dict[str, int]:
        """Per node, its publishes with a key no queue of the tree takes."""
        counts = self._totals() @ (1 - self.routed_keys())
        return {self.nodes[n]: int(counts[n]) for n in np.flatnonzero(counts)}

    def offer(
        self, states: LinkStates, offered: dict[LinkId, list[list[int]]], done: Done = lambda share: None
    ) -> None:
        """Add to `offered` (link -> per step [messages, bytes]) what the tree's links carry;
        `done(share)` after each step."""
        steps = self._steps()
        for done_steps, step in enumerate(steps, start=1):
            for (link, at), (messages, size) in self.offered(
                self._dense(step), self.states(states, step)
            ).items():
                if (messages or size) and at < len(offered[link]):  # (held past the run's end)
                    offered[link][at][0] += int(messages)
                    offered[link][at][1] += int(size)
            done(done_steps / len(steps))

    def deliver(
        self,
        states: LinkStates,
        link_ms: Callable[[LinkId, int], int],
        outcomes: Outcomes,
        done: Done = lambda share: None,
    ) -> None:
        """Add the tree's deliveries to `outcomes`; `link_ms(link, step)` is a link's latency
        plus queueing delay (the `links` table's); `done(share)` after each step."""
        max_hops = self.reach(self._totals())
        for number in np.flatnonzero(max_hops >= 0):
            outcomes.reach(*self.pairs[number], int(max_hops[number]))
        delivered: Bins = {}
        lost = np.zeros(len(self.pairs), dtype=np.int64)
        steps = self._steps()
        for done_steps, step in enumerate(steps, start=1):
            lost += self.outcomes(
                self._dense(step)[:, :, 0], self.states(states, step, self.delays(link_ms)), delivered
            )
            done(done_steps / len(steps))
        for number in np.flatnonzero(lost):
            outcomes.lose(*self.pairs[number], int(lost[number]))
        for (hops, delay, through_down), got in sorted(delivered.items()):
            for number in np.flatnonzero(got):
                outcomes.deliver(*self.pairs[number], hops, delay, through_down, int(got[number]))

    def _totals(self) -> np.ndarray:
        """Messages per node and key over every step (worked out once, after the last `add`)."""
        if self._total is None:
            cells = [self._step_cells(step) for step in self._steps()]
            self._total = self.dense(np.concatenate(cells) if cells else np.zeros((0, 4), np.int64))[:, :, 0]
        return self._total

    def _dense(self, step: int) -> np.ndarray:
        return self.dense(self._step_cells(step))

    def _steps(self) -> list[int]:
        return sorted(self._pending.keys() | self._arrays.keys())

    def _step_cells(self, step: int) -> np.ndarray:
        """The step's cells as an array, its pending cells converted once (the conversion is
        the slow part) and then let go."""
        pending = self._pending.pop(step, None)
        if pending:
            added = np.array(pending, dtype=np.int64).reshape(-1, 4)
            before = self._arrays.get(step)
            self._arrays[step] = added if before is None else np.concatenate([before, added])
        return self._arrays[step]

    # -- one step (or any set of publishes) ----------------------------------------------------

    def dense(self, cells: np.ndarray) -> np.ndarray:
        """Rows (node number, key number, messages, bytes), keys in the chunk -> node x key
        (of the chunk) x [messages, bytes]."""
        dense = np.zeros((len(self.nodes), self.keys, 2), dtype=np.int64)
        np.add.at(dense, (cells[:, 0], cells[:, 1] - self.chunk.start), cells[:, 2:4])
        return dense

    def routed_keys(self) -> np.ndarray:
        """Per key, 1 if some queue of the tree takes it."""
        return self.queue_keys.max(axis=0, initial=0)

    def crossed_by(self, published: np.ndarray) -> list[LinkId]:
        """The links `published` (node x key messages) crosses when every link passes."""
        sums = self.offered(published[:, :, None], None)
        return [link for (link, _), carried in sums.items() if carried[0] > 0]

    def reach(self, published: np.ndarray) -> np.ndarray:
        """Per (node, queue) pair, the most hops a copy of `published` (node x key messages)
        takes to it, lost on the way or not (-1: none reaches it)."""
        reached = self._arrivals((published > 0).astype(np.int64), None, binned=True)[1]
        max_hops = np.full(len(self.pairs), -1)
        for (hops, _, _, _), copies in reached.items():
            got = (self.queue_keys * (copies[self.pair_node] > 0)).max(axis=1, initial=0)
            max_hops = np.where(got > 0, np.maximum(max_hops, hops), max_hops)
        return max_hops

    def outcomes(self, published: np.ndarray, links: LinkArray, delivered: Bins) -> np.ndarray:
        """Add to `delivered` (bin -> per pair) the copies of `published` (node x key messages)
        each (node, queue) pair gets when `links` (see `states`, with delays) are as given;
        return what each pair loses."""
        lost = self.queue_keys @ published.sum(axis=0)
        for place, copies in self._arrivals(published, links, binned=True)[1].items():
            got = np.einsum("pk,pk->p", self.queue_keys, copies[self.pair_node])
            where = place[:3]
            if where in delivered:
                delivered[where] += got
            else:
                delivered[where] = got
            lost -= got
        return lost

    def delays(self, link_ms: Callable[[LinkId, int], int]) -> Delays:
        """`link_ms(link, step)` as Delays, one call per link and step."""

        def at(step: int) -> tuple[np.ndarray, np.ndarray]:
            return tuple(  # type: ignore[return-value]
                np.array([link_ms(link, step) if link else 0 for link in links], dtype=np.int64)
                for links in (self.up_links, self.down_links)
            )

        return at

    def states(self, states: LinkStates, step: int, delays: Delays | None = None) -> LinkArray:
        """Every link's state at `step`, and at every step a copy held by a link that is down
        goes on at (see LinkArray). A link that is up passes at its step, undelayed but for
        `delays`; only the links down are asked more (at 100,000 nodes, asking every link
        took 0.3 s a step)."""
        times, number_of, blocks = [step], {step: 0}, list[np.ndarray]()
        while len(blocks) < len(times):
            at = times[len(blocks)]
            block = np.zeros((len(self.nodes), 2 * WIDTH), dtype=np.int64)  # row 0: the root's
            block[1:, [0, WIDTH]] = 1
            block[1:, [3, WIDTH + 3]] = number_of[at]
            if delays is not None:
                block[1:, 1], block[1:, WIDTH + 1] = (ms[1:] for ms in delays(at))
            down_here = sorted(self.place[link] for link in states.down_links(at) if link in self.place)
            for number, column in down_here:
                link = (self.up_links if column == 0 else self.down_links)[number]
                passes = not states.losing(link, at)
                release = states.release(link, at) if passes else at
                if release not in number_of:
                    number_of[release] = len(times)
                    times.append(release)
                block[number, column] = passes
                block[number, column + 2 : column + WIDTH] = (1, number_of[release])
            blocks.append(block)
        return LinkArray(tuple(times), np.concatenate(blocks, axis=1))

    def offered(self, published: np.ndarray, links: LinkArray | None) -> dict[tuple[LinkId, int], np.ndarray]:
        """What each link carries of `published` (node x key x columns) when `links` (None:
        every link passes) lose what they lose, by (link, the step copies reach it at)."""
        rest: Places = {}
        up, _ = self._arrivals(published, links, binned=False, rest=rest)
        times = (0,) if links is None else links.times
        found = {}
        for ends, places in ((self.up_links, up), (self.down_links, rest)):
            for place, copies in places.items():
                carried = np.einsum("nkc,nk->nc", copies, self.above if ends is self.up_links else self.below)
                for number in np.flatnonzero(self.parent >= 0):
                    found[(ends[number], times[place[3]])] = carried[number]
        return found

    def _arrivals(
        self, published: np.ndarray, links: LinkArray | None, binned: bool, rest: Places | None = None
    ) -> tuple[Places, Places]:
        """Per place, the copies of `published` reaching each node from below it (itself
        included), and from everywhere, over links that pass (all of them if `links` is None).
        Unbinned, copies are told apart only by the step they are at. `rest` gets per place,
        at each node, what reaches its parent from elsewhere: what its link down is offered."""
        table = self._passing if links is None else links.table

        def shift(where: Place, delay: int, down: int, time: int) -> Place:
            return (
                (where[0] + 1, where[1] + delay, where[2] or bool(down), time)
                if binned
                else (0, 0, False, time)
            )

        up: Places = {ORIGIN: published.copy()}
        for start, end in reversed(self.levels[1:]):
            for state, group in _groups(table, start, end):
                for where, copies in list(up.items()):
                    passes, delay, down, time = _state(state, where[3], 0)
                    part = copies[group] if passes else None
                    if part is not None and part.any():  # (a bin made for nothing would be shifted on and on)
                        _add_to_parents(up, shift(where, delay, down, time), self.parent[group], part)
        at: Places = {where: copies.copy() for where, copies in up.items()}
        for start, end in self.levels[1:]:
            for state, group in _groups(table, start, end):
                outside = {where: copies[self.parent[group]] for where, copies in at.items()}
                for (
                    where,
                    copies,
                ) in up.items():  # what came from the group (a place the parents lack had none)
                    passes, delay, down, time = _state(state, where[3], 0)
                    if passes and shift(where, delay, down, time) in outside:
                        outside[shift(where, delay, down, time)] -= copies[group]
                for where, copies in outside.items():
                    if not copies.any():
                        continue
                    if rest is not None:
                        _zeros_at(rest, where, published)[group] += copies
                    passes, delay, down, time = _state(state, where[3], WIDTH)
                    if passes:
                        _zeros_at(at, shift(where, delay, down, time), published)[group] += copies
        return up, at

    @property
    def _passing(self) -> np.ndarray:
        """A LinkArray's table of one step at which every link passes, undelayed."""
        table = np.zeros((len(self.nodes), 2 * WIDTH), dtype=np.int64)
        table[:, 0] = table[:, WIDTH] = 1
        return table

    def _up_sum(self, values: np.ndarray) -> np.ndarray:
        """Per node, the sum of `values` over the nodes below it (itself included)."""
        return self._arrivals(values, None, binned=False)[0][ORIGIN]


def _groups(table: np.ndarray, start: int, end: int) -> Iterator[tuple[tuple[int, ...], np.ndarray | slice]]:
    """The nodes start .. end - 1 grouped by their links' states, each group in order: one
    slice where all are alike (most steps of most runs: sorting the rows to find that took a
    fifth of a step's time, and a slice is a view where numbers make copies)."""
    rows = table[start:end]
    if (rows == rows[0]).all():
        yield tuple(int(v) for v in rows[0]), slice(start, end)
        return
    states, which = np.unique(rows, axis=0, return_inverse=True)
    for number, state in enumerate(states):
        yield tuple(int(v) for v in state), start + np.flatnonzero(which.ravel() == number)


def _zeros_at(places: Places, where: Place, like: np.ndarray) -> np.ndarray:
    """The copies at `where`, zeros like `like` made there if none (made only then: a
    setdefault makes its default every time, a node x key array per group and place)."""
    found = places.get(where)
    if found is None:
        found = places[where] = np.zeros_like(like)
    return found


def _add_to_parents(bins: Places, where: Place, parents: np.ndarray, copies: np.ndarray) -> None:
    """Add each row of `copies` to its parent's row of bin `where` (parents in order)."""
    target = bins.get(where)
    if target is None:
        target = bins[where] = np.zeros((len(bins[ORIGIN]), *copies.shape[1:]), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
    target[parents[starts]] += np.add.reduceat(copies, starts, axis=0)
