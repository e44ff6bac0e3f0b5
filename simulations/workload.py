"""The workload, drawn from the scenario's seed: routing keys, subscribers' bindings and the
publish events. Both engines call these functions, so they see the same events; draws are
vectorised per publishing node (numpy), never per event.

Every draw has its own generator seeded by (scenario seed, entry, node), so a node's events do
not depend on which other nodes publish, nor on how a Spark job partitions the nodes.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from simulations.scenario import KeySpace, Publishers, Scenario, Subscribers
from topology.model import Binding, Queue, Topology


def key_words(keys: KeySpace, index: int) -> list[str]:
    """The words of key number `index`: level i is a letter (a, b, ...) and a number."""
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


def key_probabilities(keys: KeySpace) -> np.ndarray:
    """How likely each key is: all alike, or Zipf's law with exponent zipf_s by key number."""
    if keys.distribution == "uniform":
        return np.full(keys.size, 1.0 / keys.size)
    weights = 1.0 / np.arange(1, keys.size + 1, dtype=np.float64) ** keys.zipf_s
    return weights / weights.sum()


def matching(topology: Topology, pattern: str) -> list[str]:
    """Node names matching a glob, in the topology's order."""
    return [name for name in topology.nodes if fnmatchcase(name, pattern)]


# -- subscribers --------------------------------------------------------------------------------


def with_subscribers(scenario: Scenario) -> Topology:
    """The scenario's topology with its subscribers' queues and bindings added."""
    topology = scenario.topology
    queues = list(topology.queues)
    declared = {(q.node, q.name) for q in queues}
    bindings = list(topology.bindings)
    for entry, subscribers in enumerate(scenario.subscribers):
        for node in matching(topology, subscribers.nodes):
            if (node, subscribers.queue) not in declared:
                declared.add((node, subscribers.queue))
                queues.append(Queue(node, subscribers.queue))
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


def events(scenario: Scenario, entry: int, node: str, probabilities: np.ndarray) -> dict[str, np.ndarray]:
    """The publish events of one node of publisher entry `entry`: columns step, key (the key's
    number) and size (bytes), one row per message, in step order."""
    publishers = scenario.publishers[entry]
    counts = step_counts(scenario, publishers)
    total = int(counts.sum())
    seed = [scenario.seed, entry, *node.encode()]
    rng = np.random.default_rng(seed)
    low = max(1, publishers.size // 2)
    return {
        "step": np.repeat(np.arange(scenario.steps, dtype=np.int32), counts),
        "key": rng.choice(len(probabilities), size=total, p=probabilities).astype(np.int32),
        "size": rng.integers(low, publishers.size * 3 // 2, size=total, endpoint=True).astype(np.int64),
    }
