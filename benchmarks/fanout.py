"""Fanout federation (OpenAMQ's types): messages/s from a publisher on one child to a subscriber
on the other, end to end, against publishing and consuming on one node, in the same run.

Three amq-gateway nodes: a parent P and children C1 and C2 started with `--attach P
--attach-all 'bench.*'`, so the scenario's topic exchange (declared on all three with
`amq-config`) is federated as fanout on each child. A publish on C1 goes to C1's outbox, to P
(confirmed), to C2's queue on P (its mirrored binding), and is published again on C2, where
the consumer's queue gets it. The baseline publishes to and consumes from a plain exchange on
P alone. RabbitMQ has no such federation type, so there is no RabbitMQ row.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from . import brokers
from .brokers import BrokerUnavailable, RunningBroker
from .federation import FederationScenario, run_cli, run_scenario
from .runs import Settings
from .wire import AMQPClosed

LOCAL = FederationScenario("fanout_local", "local publish (P → P)", 0)
FANOUT = FederationScenario("fanout_federation", "fanout federation (C1 → P → C2)", 2)
FANOUT_SCENARIOS = (LOCAL, FANOUT)
#: The pattern the children federate: exactly the fanout scenario's exchange.
ATTACH_ALL = FANOUT.exchange


def _declare(
    config: Path, chain: Sequence[RunningBroker], s: FederationScenario, deadline: float
) -> dict[str, str]:
    """The scenario's topic exchange on every node of the chain; the children federate it."""
    del deadline  # declaring is immediate; run_scenario's probe waits for the federation
    for node in chain:
        run_cli(config, "-a", node.address, "add", "exchange", "topic", s.exchange)
    return {"route": "fanout federation" if s.hops else "none (one node)"}


def run_suite(settings: Settings) -> dict[str, Any]:
    """Start P, C1 and C2, run the local baseline on P and the fanout scenario, stop them."""
    print("gateway fanout federation: starting 3 nodes", flush=True)
    command = settings.gateway_command
    with tempfile.TemporaryDirectory(prefix="amq-bench-fanout-") as tmp, ExitStack() as stack:
        try:
            parent = stack.enter_context(brokers.gateway(Path(tmp) / "p", command, "bench-p"))
            attach = ("--attach", parent.address, "--attach-all", ATTACH_ALL)
            one, two = (
                stack.enter_context(brokers.gateway(Path(tmp) / name, command, f"bench-{name}", attach))
                for name in ("c1", "c2")
            )
            server = brokers.server_properties(parent)
        except (BrokerUnavailable, AMQPClosed, OSError) as exc:
            print(f"gateway fanout federation: not measured: {exc}", flush=True)
            return {"status": "unavailable", "note": f"{type(exc).__name__}: {exc}"}
        declare = partial(_declare, command.parent / "amq-config")
        started = time.monotonic()
        scenarios = {
            LOCAL.key: run_scenario([parent], LOCAL, settings, declare),
            FANOUT.key: run_scenario([one, parent, two], FANOUT, settings, declare),
        }
        print(f"gateway fanout federation: done in {time.monotonic() - started:.0f} s", flush=True)
    return {"status": "ran", "server": server, "scenarios": scenarios}
