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
- hops and delay of a delivery o->m are the tree path's length and the sum of its links'
  latency plus queueing delay; a delivery is delayed if a (durable) link of the path was down.

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
ORIGIN: Bin = (0, 0, False)
Bins = dict[Bin, np.ndarray]


class LinkStates(Protocol):
    """Which links are down when (the reference engine's failures)."""

    def down(self, link: LinkId, step: int) -> bool: ...

    def losing(self, link: LinkId, step: int) -> bool: ...


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


class TreeTraffic:
    """The publishes of one exchange on one tree of its plain forest, by (node, key, step)."""

    def __init__(self, forest: PlainForest, tree: int, keys: KeySpace, chunk: range | None = None) -> None:
        _reuse_freed_arrays()
        order = forest.trees[tree]
        self.nodes = [node for node, _ in order]
        self.index = {node: number for number, node in enumerate(self.nodes)}
        self.parent = np.array([-1 if parent is None else self.index[parent] for _, parent in order])
        depth = [0] * len(order)
        for number in range(1, len(order)):
            depth[number] = depth[self.parent[number]] + 1
        #: Each depth's nodes, a run [start, end) in breadth-first order.
        self.levels = [(depth.index(d), len(depth) - depth[::-1].index(d)) for d in range(max(depth) + 1)]
        self.up_links = [
            link_id(node, self.nodes[p]) if p >= 0 else ""
            for node, p in zip(self.nodes, self.parent, strict=True)
        ]
        self.down_links = [
            link_id(self.nodes[p], node) if p >= 0 else ""
            for node, p in zip(self.nodes, self.parent, strict=True)
        ]
        #: The keys covered, a run of key numbers (None: all of them). Every array is nodes x
        #: these keys and no key's sums touch another's, so traffic split by runs of keys adds
        #: up to the whole (the Spark engine's tasks each take one run of a large tree).
        self.chunk = range(keys.size) if chunk is None else chunk
        matched = np.zeros((len(order), len(self.chunk)), dtype=np.int64)
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

    def offer(self, states: LinkStates, offered: dict[LinkId, list[list[int]]]) -> None:
        """Add to `offered` (link -> per step [messages, bytes]) what the tree's links carry."""
        for step in self._steps():
            for link, (messages, size) in self.offered(self._dense(step), self.states(states, step)).items():
                if messages or size:
                    offered[link][step][0] += int(messages)
                    offered[link][step][1] += int(size)

    def deliver(self, states: LinkStates, link_ms: Callable[[LinkId, int], int], outcomes: Outcomes) -> None:
        """Add the tree's deliveries to `outcomes`; `link_ms(link, step)` is a link's latency
        plus queueing delay (the `links` table's)."""
        max_hops = self.reach(self._totals())
        for number in np.flatnonzero(max_hops >= 0):
            outcomes.reach(*self.pairs[number], int(max_hops[number]))
        delivered: Bins = {}
        lost = np.zeros(len(self.pairs), dtype=np.int64)
        for step in self._steps():
            lost += self.outcomes(self._dense(step)[:, :, 0], self.states(states, step, link_ms), delivered)
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
        return [link for link, carried in sums.items() if carried[0] > 0]

    def reach(self, published: np.ndarray) -> np.ndarray:
        """Per (node, queue) pair, the most hops a copy of `published` (node x key messages)
        takes to it, lost on the way or not (-1: none reaches it)."""
        reached = self._arrivals((published > 0).astype(np.int64), None, binned=True)[1]
        max_hops = np.full(len(self.pairs), -1)
        for (hops, _, _), copies in reached.items():
            got = (self.queue_keys * (copies[self.pair_node] > 0)).max(axis=1, initial=0)
            max_hops = np.where(got > 0, np.maximum(max_hops, hops), max_hops)
        return max_hops

    def outcomes(self, published: np.ndarray, links: np.ndarray, delivered: Bins) -> np.ndarray:
        """Add to `delivered` (bin -> per pair) the copies of `published` (node x key messages)
        each (node, queue) pair gets when `links` (see `states`, with delays) are as given;
        return what each pair loses."""
        lost = self.queue_keys @ published.sum(axis=0)
        for where, copies in self._arrivals(published, links, binned=True)[1].items():
            got = np.einsum("pk,pk->p", self.queue_keys, copies[self.pair_node])
            if where in delivered:
                delivered[where] += got
            else:
                delivered[where] = got
            lost -= got
        return lost

    def states(
        self, states: LinkStates, step: int, link_ms: Callable[[LinkId, int], int] | None = None
    ) -> np.ndarray:
        """Per node (but the roots), its link up and its link down at `step`: (passes, delay
        in ms, down) each, as six integer columns."""
        found = np.zeros((len(self.nodes), 6), dtype=np.int64)
        for number in range(1, len(self.nodes)):  # number 0 is the root
            for column, link in ((0, self.up_links[number]), (3, self.down_links[number])):
                found[number, column] = not states.losing(link, step)
                found[number, column + 1] = link_ms(link, step) if link_ms is not None else 0
                found[number, column + 2] = states.down(link, step)
        return found

    def offered(self, published: np.ndarray, links: np.ndarray | None) -> dict[LinkId, np.ndarray]:
        """What each link carries of `published` (node x key x columns) when `links` (see
        `states`; None: every link passes) lose what they lose."""
        up, at = self._arrivals(published, links, binned=False)
        from_below, everywhere = up[ORIGIN], at[ORIGIN]
        passes = np.ones(len(self.nodes), dtype=np.int64) if links is None else links[:, 0]
        rest = everywhere[np.maximum(self.parent, 0)] - passes[:, None, None] * from_below
        going_up = np.einsum("nkc,nk->nc", from_below, self.above)
        going_down = np.einsum("nkc,nk->nc", rest, self.below)
        found = {}
        for number in np.flatnonzero(self.parent >= 0):
            found[self.up_links[number]] = going_up[number]
            found[self.down_links[number]] = going_down[number]
        return found

    def _arrivals(self, published: np.ndarray, links: np.ndarray | None, binned: bool) -> tuple[Bins, Bins]:
        """Per bin, the copies of `published` reaching each node from below it (itself
        included), and from everywhere, over links that pass (all of them if `links` is None).
        Unbinned, every copy stays in ORIGIN's bin."""
        if links is None:
            links = np.zeros((len(self.nodes), 6), dtype=np.int64)
            links[:, 0] = links[:, 3] = 1

        def shift(where: Bin, delay: int, down: int) -> Bin:
            return (where[0] + 1, where[1] + delay, where[2] or bool(down)) if binned else where

        up: Bins = {ORIGIN: published.copy()}
        for start, end in reversed(self.levels[1:]):
            for (passes, delay, down, *_), group in _groups(links, start, end):
                if passes:
                    for where, copies in list(up.items()):
                        part = copies[group]
                        if part.any():  # (a bin made for nothing would be shifted on and on)
                            _add_to_parents(up, shift(where, delay, down), self.parent[group], part)
        at: Bins = {where: copies.copy() for where, copies in up.items()}
        for start, end in self.levels[1:]:
            for (passes_up, delay_up, down_up, passes, delay, down), group in _groups(links, start, end):
                if not passes:
                    continue
                outside = {where: copies[self.parent[group]] for where, copies in at.items()}
                if passes_up:  # what came from the group (a bin the parents lack had none)
                    for where, copies in up.items():
                        if shift(where, delay_up, down_up) in outside:
                            outside[shift(where, delay_up, down_up)] -= copies[group]
                for where, copies in outside.items():
                    if copies.any():
                        target = at.setdefault(shift(where, delay, down), np.zeros_like(published))
                        target[group] += copies
        return up, at

    def _up_sum(self, values: np.ndarray) -> np.ndarray:
        """Per node, the sum of `values` over the nodes below it (itself included)."""
        return self._arrivals(values, None, binned=False)[0][ORIGIN]


def _groups(links: np.ndarray, start: int, end: int) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """The nodes start .. end - 1 grouped by their links' states, each group in order."""
    states, which = np.unique(links[start:end], axis=0, return_inverse=True)
    for number, state in enumerate(states):
        yield tuple(int(v) for v in state), start + np.flatnonzero(which.ravel() == number)


def _add_to_parents(bins: Bins, where: Bin, parents: np.ndarray, copies: np.ndarray) -> None:
    """Add each row of `copies` to its parent's row of bin `where` (parents in order)."""
    target = bins.get(where)
    if target is None:
        target = bins[where] = np.zeros((len(bins[ORIGIN]), *copies.shape[1:]), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
    target[parents[starts]] += np.add.reduceat(copies, starts, axis=0)
