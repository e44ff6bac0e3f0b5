"""Which engine `amq-sim run --engine auto` (the default) takes: the reference engine where it
is faster and fits in memory, Spark beyond, decided from the scenario's size before anything
is drawn (docs/simulation.md, "Choosing an engine", has the measurements behind the figures).

The reference engine runs in one process: no start-up cost, and on this 2-core machine it was
the faster at every size measured (0.1 s against 6.7 s at 10,000 publishes; 163 s against
179-185 s at regions-10k's 10 million), but its memory grows with the scenario until it runs
out (20,000 nodes and 20 million publishes did not fit in 21 GB). Spark pays seconds of fixed
cost, then spreads the work over every core of the machine or cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from simulations.scenario import Scenario
from simulations.workload import matching, publishing, step_counts

#: The reference engine's peak resident memory, by the scenario's size: a fixed part, per
#: publish (its counted cells), per row of the links table (a link, either way, and a step),
#: per binding and per node x key (the trees' arrays). Fitted to five runs of regions-10k's
#: shape from 1,000 to 3,000 nodes, over-estimating each by 5 to 30% (docs/simulation.md).
BASE_BYTES = 150_000_000
BYTES_PER_PUBLISH = 150
BYTES_PER_LINK_STEP = 1_400
BYTES_PER_BINDING = 300
BYTES_PER_NODE_KEY = 70
#: The share of the memory free now that the reference engine may take.
MEMORY_SHARE = 0.5
#: Publishes from which Spark on more than two cores is taken to be the faster: on two the
#: engines were even at 10 million, and Spark's share of the work divides by the cores.
SPARK_PUBLISHES = 5_000_000


@dataclass(frozen=True)
class Size:
    """What the engines' cost grows with."""

    nodes: int
    keys: int
    bindings: int
    publishes: int
    #: Rows of the links table at most: every pair of nodes a link, route or federation
    #: joins, both ways, every step.
    link_steps: int

    @classmethod
    def of(cls, scenario: Scenario) -> Size:
        topology = scenario.topology
        per_entry = [int(step_counts(scenario, p).sum()) for p in scenario.publishers]
        bindings = len(topology.bindings) + sum(
            len(matching(topology, s.nodes)) * (min(1, s.count) if s.type == "fanout" else s.count)
            for s in scenario.subscribers
        )
        pairs = {frozenset((link.opener, link.peer)) for link in topology.effective_links()}
        pairs.update(frozenset((f.child, f.parent)) for f in topology.federations)
        return cls(
            len(topology.nodes),
            scenario.keys.size,
            bindings,
            sum(per_entry[entry] for entry, _ in publishing(scenario)),
            2 * len(pairs) * scenario.steps,
        )

    def reference_bytes(self) -> int:
        """About the reference engine's peak memory."""
        return (
            BASE_BYTES
            + BYTES_PER_PUBLISH * self.publishes
            + BYTES_PER_LINK_STEP * self.link_steps
            + BYTES_PER_BINDING * self.bindings
            + BYTES_PER_NODE_KEY * self.nodes * self.keys
        )


@dataclass(frozen=True)
class Choice:
    engine: str
    reason: str

    def __str__(self) -> str:
        return f"engine {self.engine} (auto: {self.reason})"


def choose(scenario: Scenario, master: str | None) -> Choice:
    """The engine for `scenario`, and why, in one line's words."""
    size = Size.of(scenario)
    what = (
        f"{size.publishes:,} publishes, {size.nodes:,} nodes, {size.bindings:,} bindings, {size.keys:,} keys"
    )
    if master is not None:
        return Choice("spark", f"{what}; a Spark master was given")
    need, free = size.reference_bytes(), free_memory()
    memory = f"the reference engine needs about {_gb(need)} of the {_gb(free)} free"
    if need > MEMORY_SHARE * free:
        return Choice("spark", f"{what}; {memory}, more than {MEMORY_SHARE:.0%} of it")
    cores = os.cpu_count() or 1
    if cores > 2 and size.publishes >= SPARK_PUBLISHES:
        return Choice("spark", f"{what}; {memory}, but Spark spreads this much over {cores} cores")
    return Choice("reference", f"{what}; {memory}, and is the faster on {cores} cores at this size")


def free_memory() -> int:
    """Memory free for a run now: the kernel's MemAvailable (the machine's memory where
    /proc/meminfo does not say)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"
