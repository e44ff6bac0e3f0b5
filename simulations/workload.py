"""The workload, drawn from the scenario's seed: routing keys, subscribers' bindings and the
publish events. Both engines call these functions, so they see the same events; draws are
vectorised per publishing node (numpy), never per event.

Bindings are drawn with a generator seeded by (scenario seed, entry, node). A publish event is
defined by a hash, so that Spark computes it with built-in column functions and this module
with numpy, exactly alike: event number i of a publishing node (counted from 0 in step order)
has h = xxhash64(source seed, i) and g = xxhash64(source seed, i, 1), Spark's xxhash64 over
bigints (seed 42, each value's hash seeding the next), where the source seed comes from
(scenario seed, entry, node) (source_seed). Its key is drawn from the key probabilities by
Walker's alias method with the table KeyDraw (bucket from h's high 32 bits, accepted when h's
low 32 bits are under the bucket's threshold, else the bucket's alias); its size is
low + (g >>> 1) mod (high - low + 1). A node's events depend on nothing but the scenario and
the node, never on which other nodes publish nor on how Spark partitions them.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from simulations.scenario import KeySpace, Publishers, Scenario, Subscribers
from topology.model import Binding, Queue, Topology


def key_words(keys: KeySpace, index: int) -> list[str]:
    """The words of key number `index`: level i is a letter (a, b, ...) and a number; past
    the drawn keys, a publisher's own key split at its dots."""
    if index >= keys.drawn:
        return keys.own[index - keys.drawn].split(".")
    words = []
    for level, count in enumerate(keys.words):
        below = math.prod(keys.words[level + 1 :])
        words.append(f"{chr(ord('a') + level)}{index // below % count}")
    return words


def routing_key(keys: KeySpace, index: int) -> str:
    return ".".join(key_words(keys, index))


def headers_of(keys: KeySpace, index: int) -> dict[str, Any]:
    """The headers a message with key `index` carries: {"w0": first word, ...}, for headers
    exchanges (the others ignore them)."""
    return {f"w{level}": word for level, word in enumerate(key_words(keys, index))}


def key_probabilities(keys: KeySpace, count: int | None = None) -> np.ndarray:
    """How likely each of `count` keys (default: the drawn ones) is: all alike, or Zipf's law
    with exponent zipf_s by key number (or place in a publisher's own list)."""
    count = keys.drawn if count is None else count
    if keys.distribution == "uniform":
        return np.full(count, 1.0 / count)
    weights = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** keys.zipf_s
    return weights / weights.sum()


def matching(topology: Topology, pattern: str) -> list[str]:
    """Node names matching a glob, in the topology's order."""
    return [name for name in topology.nodes if fnmatchcase(name, pattern)]


# -- subscribers --------------------------------------------------------------------------------


def reachable_exchanges(scenario: Scenario) -> frozenset[str]:
    """The exchange names a publish can reach: its publishers' and those queue routes publish
    into. In the planner's model (topology.flow) a copy changes exchange only at a queue
    route; dynamic and exchange routes and federations carry it on an exchange of its name."""
    routes = {route.exchange for route in scenario.topology.routes if route.kind == "queue"}
    return frozenset({publishers.exchange for publishers in scenario.publishers} | routes)


def with_subscribers(scenario: Scenario, reachable_only: bool = False) -> Topology:
    """The scenario's topology with its subscribers' queues and bindings added; with
    `reachable_only`, the bindings of subscribers on exchanges no publish reaches are left
    out (their queues are still declared): routing never reads them, and regions-10k's 98
    audit bindings per node on sim.fanout were 98% of the World's bindings."""
    topology = scenario.topology
    queues = list(topology.queues)
    declared = {(q.node, q.name) for q in queues}
    bindings = list(topology.bindings)
    reachable = reachable_exchanges(scenario)
    for entry, subscribers in enumerate(scenario.subscribers):
        drawn = not reachable_only or subscribers.exchange in reachable
        for node in matching(topology, subscribers.nodes):
            if (node, subscribers.queue) not in declared:
                declared.add((node, subscribers.queue))
                queues.append(Queue(node, subscribers.queue))
            if not drawn:
                continue
            rng = random.Random(f"{scenario.seed}:sub:{entry}:{node}")
            for _ in range(subscribers.count if subscribers.type != "fanout" else min(1, subscribers.count)):
                key, arguments = _draw_binding(scenario.keys, subscribers, rng)
                bindings.append(Binding(node, subscribers.exchange, subscribers.queue, key, arguments))
    return replace(topology, queues=tuple(queues), bindings=tuple(bindings))


def _draw_binding(keys: KeySpace, subscribers: Subscribers, rng: random.Random) -> tuple[str, dict[str, Any]]:
    words = key_words(keys, rng.randrange(keys.size))
    if subscribers.type == "fanout":
        return "", {}
    if subscribers.type == "direct":
        return ".".join(words), {}
    if subscribers.type == "headers":
        picked = sorted(rng.sample(range(len(words)), k=min(len(words), rng.randint(1, 2))))
        arguments: dict[str, Any] = {"x-match": rng.choice(("all", "any"))}
        arguments.update({f"w{level}": words[level] for level in picked})
        return "", arguments
    words = [word if rng.random() >= subscribers.wildcards else "*" for word in words]
    if rng.random() < subscribers.wildcards:
        words = [*words[: rng.randrange(len(words))], "#"]
    return ".".join(words), {}


# -- publish events -----------------------------------------------------------------------------


def publishing(scenario: Scenario) -> list[tuple[int, str]]:
    """(publisher entry, node) for every node that publishes."""
    return [
        (entry, node)
        for entry, publishers in enumerate(scenario.publishers)
        for node in matching(scenario.topology, publishers.nodes)
    ]


def step_counts(scenario: Scenario, publishers: Publishers) -> np.ndarray:
    """Messages one node of `publishers` sends in each step (rate shaped by the pattern)."""
    seconds = np.arange(scenario.steps, dtype=np.float64) * scenario.step_ms / 1000.0
    if publishers.pattern == "bursts":
        factor = np.where(
            np.mod(seconds, publishers.burst_every) < publishers.burst_length, publishers.burst_factor, 1.0
        )
    elif publishers.pattern == "diurnal":
        factor = 1.0 + publishers.amplitude * np.sin(2.0 * np.pi * seconds / scenario.duration)
    else:
        factor = np.ones_like(seconds)
    expected = publishers.rate * factor * scenario.step_ms / 1000.0
    # Whole messages per step that add up to the expected total: a step sends what takes the
    # running total to the next whole number (1.7 msg/step sends 1, 2, 2, 1, 2, ...).
    running = np.floor(np.cumsum(expected) + 1e-9).astype(np.int64)
    return np.diff(running, prepend=0)


#: xxHash64's primes, as Spark's XXH64 uses them.
_P1, _P2, _P3, _P4, _P5 = (
    np.uint64(p)
    for p in (
        0x9E3779B185EBCA87,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0x85EBCA77C2B2AE63,
        0x27D4EB2F165667C5,
    )
)
#: The seed Spark's xxhash64 function starts from.
SPARK_HASH_SEED = 42


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's XXH64.hashLong over uint64 arrays (arithmetic wraps modulo 2**64)."""
    h = seed + _P5 + np.uint64(8)
    h ^= _rotl(value * _P2, 31) * _P1
    h = _rotl(h, 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def xxhash64(*values: np.ndarray | int) -> np.ndarray:
    """Spark SQL's xxhash64(v1, v2, ...) over bigint values, as unsigned 64-bit integers."""
    arrays = [np.asarray(v, dtype=np.int64).astype(np.uint64) for v in values]
    h = np.full(np.broadcast(*arrays).shape, SPARK_HASH_SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for array in arrays:
            h = _hash_long(np.broadcast_to(array, h.shape), h)
    return h


def source_seed(scenario: Scenario, entry: int, node: str) -> int:
    """The seed of one publishing node's events: a signed 64-bit number from (scenario seed,
    entry, node)."""
    digest = hashlib.blake2b(f"{scenario.seed}:pub:{entry}:{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass(frozen=True)
class KeyDraw:
    """Walker's alias table for the key probabilities, in integers so that both engines take
    the same decisions: an event in bucket j (of `size`) keeps j when its 32-bit draw is
    under threshold[j] (out of 2**32), else takes alias[j]; the key is that number, or for a
    publisher with its own keys, `numbers` at it."""

    size: int
    threshold: tuple[int, ...]
    alias: tuple[int, ...]
    numbers: tuple[int, ...] | None = None


def key_draw(keys: KeySpace, numbers: tuple[int, ...] | None = None) -> KeyDraw:
    """The alias table of the key space's distribution over its drawn keys, or over the keys
    numbered `numbers` (Vose's construction)."""
    probabilities = key_probabilities(keys, None if numbers is None else len(numbers))
    size = len(probabilities)
    scaled = [float(p) * size for p in probabilities]
    threshold, alias = [1 << 32] * size, list(range(size))
    small = [j for j, p in enumerate(scaled) if p < 1.0]
    large = [j for j, p in enumerate(scaled) if p >= 1.0]
    while small and large:
        low, high = small.pop(), large[-1]
        threshold[low] = min(1 << 32, round(scaled[low] * (1 << 32)))
        alias[low] = high
        scaled[high] -= 1.0 - scaled[low]
        if scaled[high] < 1.0:
            small.append(large.pop())
    return KeyDraw(size, tuple(threshold), tuple(alias), numbers)


def publisher_draws(scenario: Scenario) -> tuple[KeyDraw, ...]:
    """Each publisher entry's draw: over its own keys, else the drawn keys' (one table,
    shared)."""
    drawn = key_draw(scenario.keys)
    return tuple(
        key_draw(scenario.keys, tuple(scenario.keys.number(key) for key in p.keys)) if p.keys else drawn
        for p in scenario.publishers
    )


def size_range(publishers: Publishers) -> tuple[int, int]:
    """The smallest and largest body a publisher sends, both included."""
    return max(1, publishers.size // 2), publishers.size * 3 // 2


def draw_keys(draw: KeyDraw, h: np.ndarray) -> np.ndarray:
    """Key numbers from event hashes h (uint64), by the alias table."""
    bucket = ((h >> np.uint64(32)) * np.uint64(draw.size)) >> np.uint64(32)
    bucket = bucket.astype(np.int64)
    below = (h & np.uint64(0xFFFFFFFF)).astype(np.int64) < np.asarray(draw.threshold, dtype=np.int64)[bucket]
    drawn = np.where(below, bucket, np.asarray(draw.alias, dtype=np.int64)[bucket])
    return drawn if draw.numbers is None else np.asarray(draw.numbers, dtype=np.int64)[drawn]


def events(
    scenario: Scenario, entry: int, node: str, draw: KeyDraw | None = None, steps: range | None = None
) -> dict[str, np.ndarray]:
    """The publish events of one node of publisher entry `entry` (in `steps`, default all):
    columns step, key (the key's number) and size (bytes), one row per message, in step
    order (see the module's docstring for the draw; `draw` is the entry's)."""
    publishers = scenario.publishers[entry]
    draw = draw or publisher_draws(scenario)[entry]
    steps = range(scenario.steps) if steps is None else steps
    counts = step_counts(scenario, publishers)
    before = int(counts[: steps.start].sum())
    counts = counts[steps.start : steps.stop]
    index = np.arange(before, before + int(counts.sum()), dtype=np.int64)
    seed = source_seed(scenario, entry, node)
    low, high = size_range(publishers)
    spread = (xxhash64(seed, index, 1) >> np.uint64(1)) % np.uint64(high - low + 1)
    return {
        "step": np.repeat(np.arange(steps.start, steps.stop, dtype=np.int32), counts),
        "key": draw_keys(draw, xxhash64(seed, index)).astype(np.int32),
        "size": (low + spread.astype(np.int64)).astype(np.int64),
    }
