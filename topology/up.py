"""`amq-gateway up FILE`: run a whole topology on this host, the project's main job.

It loads and checks the file, starts every node that lives on this host as its own process
(data and log under `<var>/<node>`), waits until each answers, applies the topology, waits for
the links and peerings to come up, prints the route map and the link states and, with
`--traffic N`, shows N messages per publisher arriving where the topology sends them. Then it
runs until Ctrl-C (or stops at once with `--exit`) and stops every node it started.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import trio

from federation.management_client import ManagementFailed
from topology import processes
from topology.apply import apply_plan
from topology.live import LiveState, read_live
from topology.model import Topology
from topology.plan import plan_topology
from topology.prepare import Refused, load_checked
from topology.processes import NodeProcess, StartFailed
from topology.report import live_report
from topology.traffic import send_traffic

#: Seconds to wait for every link and peering to be Operational before printing the map.
CONNECT_TIMEOUT = 30.0
#: Seconds for each management request.
REQUEST_TIMEOUT = 10.0

Say = Callable[[str], None]


class UpFailed(Exception):
    """`up` cannot go on; the message says why (the nodes it started are stopped)."""


async def start_nodes(topology: Topology, var: Path, started: list[NodeProcess], say: Say) -> None:
    """Start the nodes on this host (appending each to `started` at once, so a failure still
    stops them all) and wait until every one answers."""
    for node in topology.nodes.values():
        if processes.is_local(node.host):
            started.append(processes.start(node, var))
            say(f"started {node.name} on {node.endpoint} (data and log in {var / node.name})")
        else:
            say(f"{node.name} on {node.endpoint} is not on this host: expecting it to be running")
    async with trio.open_nursery() as nursery:
        for each in started:
            nursery.start_soon(processes.wait_ready, each)


async def wait_connected(topology: Topology) -> LiveState:
    """The live state once every link and peering is Operational, or as it is after
    CONNECT_TIMEOUT (the report then shows which are not)."""
    live = await read_live(topology, timeout=REQUEST_TIMEOUT)
    with trio.move_on_after(CONNECT_TIMEOUT):
        while not live.all_operational():
            await trio.sleep(0.5)
            live = await read_live(topology, timeout=REQUEST_TIMEOUT)
    return live


async def bring_up(path: Path, var: Path, traffic: int, stay: bool, say: Say) -> int:
    topology = load_checked(path, say)
    started: list[NodeProcess] = []
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        say(f"received {signal.Signals(signum).name}: stopping")
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                await run_topology(topology, var, traffic, started, say)
                if not stay:
                    nursery.cancel_scope.cancel()
                else:
                    say("up: running; Ctrl-C stops every node started here")
    finally:
        processes.stop_all(started, say)
    return 0


async def run_topology(
    topology: Topology, var: Path, traffic: int, started: list[NodeProcess], say: Say
) -> None:
    await start_nodes(topology, var, started, say)
    plan = await plan_topology(topology, prune=False, timeout=REQUEST_TIMEOUT)
    if not plan.complete:
        raise UpFailed("\n".join(plan.lines()))
    result = await apply_plan(plan, say=say)
    if not result.ok:
        raise UpFailed(result.failure)
    live = await wait_connected(topology)
    for line in live_report(topology, live):
        say(line)
    if not live.all_operational():
        say(f"up: not every link is Operational after {CONNECT_TIMEOUT:g} s; the tables above show which")
    if traffic and topology.publishers:
        report = await send_traffic(topology, traffic, REQUEST_TIMEOUT)
        for line in report.lines():
            say(line)
        if not report.ok:
            raise UpFailed(
                "the demo traffic did not arrive as the topology says (the table above shows where)"
            )


def up(path: Path, var: Path, traffic: int, stay: bool) -> int:
    """The command: exit 0 after a clean stop, 1 when something could not be done."""
    try:
        return trio.run(bring_up, path, var, traffic, stay, print_flushed)
    except* (UpFailed, Refused, StartFailed) as group:
        for error in leaves(group):
            print(f"amq-gateway up: {error}", file=sys.stderr, flush=True)
    except* ManagementFailed as group:
        for error in leaves(group):
            print(f"amq-gateway up: Failed: {error}", file=sys.stderr, flush=True)
    return 1


def leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    """The exceptions in a group, however deeply nurseries nested it."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from leaves(error)
        else:
            yield error


def print_flushed(line: str) -> None:
    print(line, flush=True)
