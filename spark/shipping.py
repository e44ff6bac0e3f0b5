"""What executors are sent of a scenario. A generated topology travels as its generator's spec
and is made again where it is used (the generators are seeded: the same topology), so the
broadcast value is as large at 100,000 nodes as at 100, where the topology itself pickled to
5 MB at 10,000 nodes; a topology read from a file travels as read (a file someone wrote)."""

from __future__ import annotations

from dataclasses import replace

from simulations.generators import generate
from simulations.scenario import Scenario
from topology.model import Topology


def shipped(scenario: Scenario) -> Scenario:
    """`scenario` to broadcast: a generated topology left for `received` to make again."""
    if scenario.generator is None:
        return scenario
    return replace(scenario, topology=Topology(scenario.topology.name, scenario.topology.path, {}))


def received(scenario: Scenario) -> Scenario:
    """A `shipped` scenario whole again."""
    if scenario.generator is None:
        return scenario
    return replace(scenario, topology=generate(scenario.generator))
