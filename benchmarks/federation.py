"""Federation scenarios: publish on the first node of a chain, consume on the last.

Each broker runs as three nodes side by side (A, B, C) on spare ports. The one-hop scenario
uses A → B, the two-hop one A → B → C, each on its own exchange so that the two never share
traffic. RabbitMQ federates with its exchange federation plugin (the downstream node pulls from
an upstream); our nodes with the routes `amq-route` adds, set up with the CLIs the project
ships, exactly as an operator would.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, closing
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from pamqp import commands

from . import brokers
from .brokers import BrokerUnavailable, RunningBroker, rabbitmqctl
from .load import BODY_SIZE, Workload
from .runs import ScenarioFailed, Settings, measure, repeat
from .wire import STAMP, AMQPClosed, Connection, publish_template

NODES = ("a", "b", "c")
# Messages in flight per link, both brokers: RabbitMQ's prefetch-count, our --credit.
LINK_CREDIT = 1000
CLI_TIMEOUT = 30.0
PROBE_EVERY_S = 0.1
# After the first probe arrives: time for any earlier one still on its way to land before
# the purge. One that lands later anyway is counted as unexpected and fails the run.
QUIET_S = 0.5
PROBE_SEQ = 2**64 - 1  # outside every run's sequence numbers


@dataclass(frozen=True)
class FederationScenario:
    key: str
    title: str
    hops: int

    @property
    def exchange(self) -> str:
        return f"bench.{self.key}.x"

    @property
    def queue(self) -> str:
        return f"bench.{self.key}"

    @property
    def routing_key(self) -> str:
        return f"bench.{self.key}"


FEDERATION_SCENARIOS = (
    FederationScenario("fed_one_hop", "one hop (A → B)", 1),
    FederationScenario("fed_two_hops", "two hops (A → B → C)", 2),
)
MAX_HOPS = max(s.hops for s in FEDERATION_SCENARIOS)


class FederationUnavailable(Exception):
    """Federation could not be configured (a CLI refused or failed): not measured, with why."""

    def __init__(self, command: str, said: str) -> None:
        super().__init__(f"{command}: {said}")
        self.said = said  # the CLI's own words, the same for every node and exchange


# ---------------------------------------------------------------- RabbitMQ


def _link_rabbitmq(nodes: Sequence[RunningBroker]) -> None:
    """Each node but the first gets the one before it as its upstream, and a cluster name.

    Without a cluster name RabbitMQ 3.10's federation looks up the host name once per message,
    which halves its rate (baseline note). max-hops must cover the longest chain, or B would
    not pass C's binding on to A.
    """
    for upstream, node in pairwise(nodes):
        rabbitmqctl(node, "set_cluster_name", f"bench-{node.port}")
        definition = {
            "uri": f"amqp://guest:guest@{upstream.address}",
            "ack-mode": "on-confirm",
            "prefetch-count": LINK_CREDIT,
            "max-hops": MAX_HOPS,
        }
        rabbitmqctl(node, "set_parameter", "federation-upstream", "previous", json.dumps(definition))


def _route_rabbitmq(chain: Sequence[RunningBroker], s: FederationScenario, deadline: float) -> dict[str, str]:
    """The exchange on every node of the chain, federated from the previous node by policy.

    Nothing to wait for here (deadline unused): the probe before each run shows the links up.
    """
    for node in chain:
        with closing(Connection.open(node.host, node.port)) as conn:
            conn.call(commands.Exchange.Declare(exchange=s.exchange, exchange_type="topic"))
    pattern = f"^{re.escape(s.exchange)}$"
    policy = json.dumps({"federation-upstream": "previous"})
    for node in chain[1:]:
        rabbitmqctl(node, "set_policy", "--apply-to", "exchanges", s.key, pattern, policy)
    return {"route": "federated exchange"}


# ---------------------------------------------------------------- amq-gateway


def run_cli(command: Path, *args: str) -> str:
    """Run one of our CLIs; its output, or FederationUnavailable with what it printed."""
    try:
        done = subprocess.run(
            [str(command), *args], capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise FederationUnavailable(
            shlex.join([command.name, *args]), f"no answer after {CLI_TIMEOUT:.0f} s"
        ) from None
    except OSError as exc:
        raise FederationUnavailable(command.name, str(exc)) from None
    if done.returncode != 0:
        raise FederationUnavailable(shlex.join([command.name, *args]), (done.stdout + done.stderr).strip())
    return done.stdout


def _wait_operational(route_cli: Path, dest: RunningBroker, src: RunningBroker, deadline: float) -> None:
    """Poll `amq-route link list <dest>` until its link to src shows Operational."""
    while True:
        rows = [line.split() for line in run_cli(route_cli, "link", "list", dest.address).splitlines()]
        row = next((r for r in rows if r[:2] == [src.host, str(src.port)]), None)
        if row is not None and "Operational" in row:
            return
        if time.monotonic() > deadline:
            raise ScenarioFailed(f"link {dest.address} <- {src.address} not Operational: {row}")
        time.sleep(0.2)


def _route_gateway(
    cli_dir: Path, chain: Sequence[RunningBroker], s: FederationScenario, deadline: float
) -> dict[str, str]:
    """The exchange on every node, then a dynamic route per hop, or else an exchange route.

    Dynamic routes are what the issue asks to measure; while `dynamic add` is refused (not
    implemented yet), an exchange route with the benchmark's key carries the same traffic
    over the same links, and the report says which kind ran.
    """
    config, route = cli_dir / "amq-config", cli_dir / "amq-route"
    for node in chain:
        run_cli(config, "-a", node.address, "add", "exchange", "topic", s.exchange)
    hops = list(pairwise(chain))
    credit = ("--credit", str(LINK_CREDIT))
    recorded = {"route": "dynamic"}
    added: list[tuple[RunningBroker, RunningBroker]] = []
    try:
        for src, dest in hops:
            run_cli(route, *credit, "dynamic", "add", dest.address, src.address, s.exchange)
            added.append((src, dest))
    except FederationUnavailable as refused:
        for src, dest in added:
            run_cli(route, "dynamic", "del", dest.address, src.address, s.exchange)
        for src, dest in hops:
            run_cli(route, *credit, "route", "add", dest.address, src.address, s.exchange, s.routing_key)
        recorded = {"route": "exchange route", "dynamic_refused": refused.said}
    for src, dest in hops:
        _wait_operational(route, dest, src, deadline)
    return recorded


# ---------------------------------------------------------------- runs


def _wait_flowing(first: RunningBroker, last: RunningBroker, s: FederationScenario, deadline: float) -> None:
    """Publish probes on the first node until one reaches the queue on the last, then purge.

    Links, routes and propagated bindings come up asynchronously and "Operational" does not
    prove that messages flow; a message published before the path is complete would be
    dropped on the first node and counted as lost.
    """
    prefix, suffix = publish_template(s.exchange, s.routing_key, False, BODY_SIZE)
    probe = prefix + STAMP.pack(0, PROBE_SEQ) + suffix
    with (
        closing(Connection.open(first.host, first.port)) as publisher,
        closing(Connection.open(last.host, last.port)) as watcher,
    ):
        while not watcher.call(commands.Queue.Declare(queue=s.queue, passive=True)).message_count:
            if time.monotonic() > deadline:
                raise ScenarioFailed(f"no probe reached {last.address} from {first.address}")
            publisher.sock.sendall(probe)
            time.sleep(PROBE_EVERY_S)
        time.sleep(QUIET_S)
        watcher.call(commands.Queue.Purge(queue=s.queue))


def _run_once(chain: Sequence[RunningBroker], s: FederationScenario, settings: Settings) -> dict[str, Any]:
    """Publish with confirms on the chain's first node, consume on its last: at least once end
    to end, since both brokers' links acknowledge upstream only once downstream has the message."""
    deadline = time.monotonic() + settings.timeout
    _wait_flowing(chain[0], chain[-1], s, deadline)
    work = Workload(
        host=chain[0].host,
        port=chain[0].port,
        exchange=s.exchange,
        routing_key=s.routing_key,
        queue=s.queue,
        messages=settings.messages,
        confirms=True,
        idle_timeout=settings.timeout,
    )
    return measure(work, chain[-1], chain, deadline)


Route = Callable[[Sequence[RunningBroker], FederationScenario, float], dict[str, str]]


def run_scenario(
    nodes: Sequence[RunningBroker], s: FederationScenario, settings: Settings, route: Route
) -> dict[str, Any]:
    """Federate the scenario's exchange along its chain, bind the consumer's queue on the last
    node, and repeat runs; a refused configuration is "not measured", anything else "failed"."""
    chain, last = nodes[: s.hops + 1], nodes[s.hops]
    print(f"  {s.key}: federating {' -> '.join(n.address for n in chain)}", flush=True)
    try:
        recorded = route(chain, s, time.monotonic() + settings.timeout)
        with closing(Connection.open(last.host, last.port, timeout=settings.timeout)) as setup:
            setup.call(commands.Queue.Declare(queue=s.queue))
            setup.call(commands.Queue.Bind(queue=s.queue, exchange=s.exchange, routing_key=s.routing_key))
            result = repeat(s.key, s.title, settings.repeat, partial(_run_once, chain, s, settings))
            setup.call(commands.Queue.Delete(queue=s.queue))
    except (FederationUnavailable, BrokerUnavailable) as exc:
        print(f"  {s.key}: not measured: {exc}", flush=True)
        return {"title": s.title, "ok": False, "measured": False, "error": str(exc)}
    except Exception as exc:  # reported, the other scenario still runs
        print(f"  {s.key}: FAILED: {exc}", flush=True)
        return {"title": s.title, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {**result, **recorded}


def _start(name: str, workdir: Path, settings: Settings, node: str) -> AbstractContextManager[RunningBroker]:
    if name == "rabbitmq":
        # The plugin only where a link starts: the downstream nodes.
        return brokers.rabbitmq(workdir, ("rabbitmq_federation",) if node != NODES[0] else ())
    return brokers.gateway(workdir, settings.gateway_command, f"bench-{node}")


def run_suite(name: str, settings: Settings) -> dict[str, Any]:
    """Start the broker's three nodes, run both federation scenarios, stop the nodes."""
    print(f"{name} federation: starting {len(NODES)} nodes", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"amq-bench-fed-{name}-") as tmp, ExitStack() as stack:
        try:
            nodes = [stack.enter_context(_start(name, Path(tmp) / n, settings, n)) for n in NODES]
            server = brokers.server_properties(nodes[0])
            if name == "rabbitmq":
                _link_rabbitmq(nodes)
                route: Route = _route_rabbitmq
            else:
                route = partial(_route_gateway, settings.gateway_command.parent)
        except (BrokerUnavailable, AMQPClosed, OSError) as exc:
            print(f"{name} federation: not measured: {exc}", flush=True)
            return {"status": "unavailable", "note": f"{type(exc).__name__}: {exc}"}
        scenarios = {s.key: run_scenario(nodes, s, settings, route) for s in FEDERATION_SCENARIOS}
    return {"status": "ran", "server": server, "scenarios": scenarios}
