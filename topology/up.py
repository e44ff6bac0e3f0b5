"""`amq-gateway up FILE`: run a whole topology on this host, the project's main job.

It loads and checks the file, starts every node that lives on this host as its own process
(data and log under `<var>/<node>`; `--fresh` removes them first), waits until each logs its
own ready line, applies the topology, waits for the links and peerings to come up, prints the
route map and the link states and, with `--traffic N`, shows N messages per publisher arriving
where the topology sends them. Then it runs until Ctrl-C (or stops at once with `--exit`),
reporting and restarting any node that ends (topology.supervisor), and stops every node it
started.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trio

from federation.management_client import ManagementFailed
from topology.apply import apply_plan
from topology.fresh import InUse, remove_state
from topology.live import LiveState, read_live
from topology.model import Topology
from topology.plan import plan_topology
from topology.prepare import Refused, load, load_checked
from topology.processes import StartFailed
from topology.report import live_report
from topology.supervisor import Say, Supervisor
from topology.traffic import send_traffic

#: Seconds to wait for every link and peering to be Operational before printing the map.
CONNECT_TIMEOUT = 30.0
#: Seconds for each management request.
REQUEST_TIMEOUT = 10.0


class UpFailed(Exception):
    """`up` cannot go on; the message says why (the nodes it started are stopped)."""


@dataclass(frozen=True)
class Options:
    """What the command line asks of `up` besides the file."""

    var: Path
    traffic: int = 0
    #: Run until Ctrl-C (False: `--exit`, stop once it is all shown).
    stay: bool = True
    #: Start a node again when it ends (False: `--no-restart`).
    restart: bool = True
    #: Remove the nodes' data and logs before starting them (`--fresh`).
    fresh: bool = False


async def wait_connected(topology: Topology) -> LiveState:
    """The live state once every link and peering is Operational, or as it is after
    CONNECT_TIMEOUT (the report then shows which are not)."""
    live = await read_live(topology, timeout=REQUEST_TIMEOUT)
    with trio.move_on_after(CONNECT_TIMEOUT):
        while not live.all_operational():
            await trio.sleep(0.5)
            live = await read_live(topology, timeout=REQUEST_TIMEOUT)
    return live


async def bring_up(path: Path, options: Options, say: Say) -> int:
    topology = load_checked(path, say)
    if options.fresh:
        for removed in remove_state(topology, options.var):
            say(f"removed {removed}")
    nodes = Supervisor(options.var, say, options.restart)
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        say(f"received {signal.Signals(signum).name}: stopping")
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                await nodes.start_all(topology, nursery)
                await run_topology(topology, options.traffic, say)
                if not options.stay:
                    nursery.cancel_scope.cancel()
                else:
                    say("up: running; Ctrl-C stops every node started here")
    finally:
        await nodes.stop_all()
    return 0


async def run_topology(topology: Topology, traffic: int, say: Say) -> None:
    """Apply the file to the running nodes, show the map and the demo traffic."""
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


def up(path: Path, options: Options) -> int:
    """The command: exit 0 after a clean stop, 1 when something could not be done."""
    try:
        return trio.run(bring_up, path, options, print_flushed)
    except* (UpFailed, Refused, StartFailed, InUse) as group:
        for error in leaves(group):
            print(f"amq-gateway up: {error}", file=sys.stderr, flush=True)
    except* ManagementFailed as group:
        for error in leaves(group):
            print(f"amq-gateway up: Failed: {error}", file=sys.stderr, flush=True)
    return 1


def clean(path: Path, var: Path) -> int:
    """`amq-gateway clean FILE`: remove what `up` keeps for the file's nodes; exit 1 if one runs."""
    try:
        removed = remove_state(load(path), var)
    except (Refused, InUse) as error:
        print(f"amq-gateway clean: {error}", file=sys.stderr, flush=True)
        return 1
    for directory in removed:
        print(f"removed {directory}")
    if not removed:
        print(f"nothing to remove in {var}")
    return 0


def leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    """The exceptions in a group, however deeply nurseries nested it."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from leaves(error)
        else:
            yield error


def print_flushed(line: str) -> None:
    print(line, flush=True)
