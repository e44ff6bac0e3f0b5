"""`amq-sim validate SCENARIO`: run a scenario on live nodes and compare what they count with
what the simulation predicts (simulations.validation), so a simulation claim is checked rather
than believed.

Theory of operation. The scenario's topology (with its subscribers' queues and bindings) is
started on free loopback ports, one `amq-gateway serve` per node with its data in `<var>/<node>`,
with a TCP proxy (topology.proxy) between every two nodes, and applied as `amq-gateway up`
applies a file. Its publish events (simulations.events) are then published for real, step by
step on a clock that follows the scenario's time: each node's events of a step on a confirming
connection of its own, with the event's routing key, headers and properties. The failures
happen for real at their times: a node is killed with SIGKILL and started again (same data)
when the failure ends; a link cut closes the connections between two nodes at their proxies
(both ends see them end) and refuses new ones until it heals; a partition silences them (only
heartbeats tell). Consumers on the scenario's queues measure each message's delay.

Counts only agree exactly if every publish meets the state the model gives its time. Before a
failure begins the run waits, clock stopped, until the federation is quiescent (no count,
binding, interest or route state moving) and reads the counters of a node it is about to kill
(they start from zero after the restart, so the runs add up). Once a failure has begun the
links retry on their own real-time schedules, so the clock never stops again until the next
quiescence: at each moment the model has a node ready or a link carrying again, the run checks
the live federation is there too, waits if it is behind (publishes due meanwhile go out late)
and says by how much. At the end it waits for quiescence and reads every node's counters.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import trio
from pamqp import commands

from federation.client import ClientError, connect
from federation.formatting import route_peer
from federation.management_client import ManagementClient, ManagementFailed
from gateway.names import SYSTEM_EXCHANGES
from gateway.wire import Content
from simulations.events import Event, scenario_events
from simulations.scenario import Scenario
from simulations.validation import LiveCounts, LiveRunFailed
from simulations.world import LinkId, World, link_ends, link_id
from topology import processes
from topology.apply import apply_plan
from topology.live import OPERATIONAL
from topology.model import Topology
from topology.plan import plan_topology
from topology.processes import NodeProcess, free_port
from topology.proxy import TcpProxy
from topology.up import CONNECT_TIMEOUT, leaves, wait_connected

Say = Callable[[str], None]

#: Seconds for each management request and connection.
REQUEST_TIMEOUT = 10.0
#: Seconds the counts must stay unchanged for the federation to count as quiescent.
SETTLE = 1.0
#: Seconds between two readings while waiting for quiescence or for a link.
POLL = 0.2
#: Seconds to wait for quiescence, and for a link the model says is back, beyond its time.
QUIESCENCE_TIMEOUT = 60.0
LINK_TIMEOUT = 130.0
#: Seconds the live federation may lag the model at a moment before validate says so.
LATE = 0.25
#: The most nodes a scenario validated live may have (each is a process on this host).
MAX_NODES = 16


class ValidateFailed(LiveRunFailed):
    """The live run could not be made to follow the scenario; the message says where."""


def on_free_ports(topology: Topology) -> Topology:
    """The topology with every node on 127.0.0.1 at a free port."""
    nodes = {name: replace(node, host="127.0.0.1", port=free_port()) for name, node in topology.nodes.items()}
    return replace(topology, nodes=nodes)


@dataclass(frozen=True)
class Moment:
    """Something the live run does at a time of the scenario: kill a node, start it again and
    wait until it is ready (when the model has it ready), cut or heal the links between two
    groups of nodes, or wait for a link the model says is back."""

    at: float
    action: str  # "kill", "restart", "ready", "cut", "partition", "heal" or "link-up"
    node: str = ""
    link: LinkId = ""
    #: The groups of nodes a cut or a partition separates.
    groups: tuple[tuple[str, ...], ...] = ()


#: At one time: failures end before others begin, and links are waited for last.
ORDER = {"heal": 0, "restart": 1, "ready": 2, "kill": 3, "cut": 4, "partition": 4, "link-up": 5}


def moments(scenario: Scenario, recovery: dict[LinkId, list[tuple[float, float]]]) -> list[Moment]:
    """The failures' moments, and each link's return as the model predicts it, in time order."""
    found = []
    for failure in scenario.failures:
        if failure.node is not None:
            ready = failure.end + (scenario.restart if failure.restart is None else failure.restart)
            found += [
                Moment(failure.start, "kill", failure.node),
                Moment(failure.end, "restart", failure.node),
                Moment(ready, "ready", failure.node),
            ]
        elif failure.link is not None:
            groups = ((failure.link[0],), (failure.link[1],))
            found += [Moment(failure.start, "cut", groups=groups), Moment(failure.end, "heal", groups=groups)]
        elif failure.partition is not None:
            named = {name for group in failure.partition for name in group}
            rest = tuple(name for name in scenario.topology.nodes if name not in named)
            sides = tuple(group for group in (*failure.partition, rest) if group)
            found += [
                Moment(failure.start, "partition", groups=sides),
                Moment(failure.end, "heal", groups=sides),
            ]
    for link, windows in recovery.items():
        found += [Moment(up, "link-up", link=link) for _, up in windows]
    return sorted(found, key=lambda m: (m.at, ORDER[m.action], m.node, m.link))


class Clock:
    """The scenario's time on Trio's clock, stopped while the run waits for quiescence before a
    failure (see the module)."""

    def __init__(self) -> None:
        self.origin = trio.current_time()

    def now(self) -> float:
        return trio.current_time() - self.origin

    async def wait_until(self, at: float) -> None:
        await trio.sleep_until(self.origin + at)

    @asynccontextmanager
    async def stopped(self) -> AsyncIterator[None]:
        began = trio.current_time()
        try:
            yield
        finally:
            self.origin += trio.current_time() - began


class LiveRun:
    """The nodes of one validate run, their publishers and what they counted."""

    def __init__(self, topology: Topology, var: Path, say: Say) -> None:
        self.topology = topology
        self.var = var
        self.say = say
        #: Nodes ready (they take publishes), and nodes started but not ready yet.
        self.running: dict[str, NodeProcess] = {}
        self.starting: dict[str, NodeProcess] = {}
        #: The scenario's queues (the nodes' own, such as bridge queues, are not compared).
        self.queues = {(queue.node, queue.name) for queue in topology.queues}
        #: ... and its exchanges (and the built-in ones published into; not the management ones).
        self.exchanges = {(exchange.node, exchange.name) for exchange in topology.exchanges}
        #: Queues a queue route passes on: the simulation counts what reaches them as the
        #: route's, so only what the route did not take counts (validate consumes none there).
        self.passed_on = queue_route_sources(topology)
        #: Counts read from runs of nodes that were killed since.
        self.before = LiveCounts()
        #: Per node, set while it runs (its consumer waits on it).
        self.started: dict[str, trio.Event] = {}
        #: Per queue, the delay of each message consumed from it (seconds).
        self.delays: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.published: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)

    # -- nodes ---------------------------------------------------------------------------------

    async def start(self, name: str) -> None:
        await self.spawn(name)
        await self.ready(name)

    async def spawn(self, name: str) -> None:
        """Start the node's process (a restart: its data is where the last run left it)."""
        self.starting[name] = await processes.start(self.topology.nodes[name], self.var)

    async def ready(self, name: str) -> None:
        """Wait until the started node is ready; from then on it takes publishes."""
        started = self.starting.pop(name)
        try:
            await processes.wait_ready(started)
        except processes.StartFailed:
            started.process.kill()
            raise
        self.running[name] = started
        self.started.setdefault(name, trio.Event()).set()

    async def kill(self, name: str) -> None:
        """Read the node's counters, then SIGKILL it."""
        add(self.before, await self.read_node(name))
        self.started[name] = trio.Event()
        started = self.running.pop(name)
        started.process.send_signal(signal.SIGKILL)
        await started.process.wait()
        self.say(f"validate: killed {name} (SIGKILL)")

    async def stop_all(self) -> None:
        with trio.CancelScope(shield=True):
            await processes.stop_all([*self.running.values(), *self.starting.values()], lambda line: None)

    # -- publishing ----------------------------------------------------------------------------

    async def publish(self, batch: list[Event]) -> None:
        """One step's events, each node's on a confirming connection of its own (opened for the
        step, so a node killed between steps leaves nothing behind); returns once every
        publish is confirmed. A node that is down refuses its events."""
        by_node: dict[str, list[Event]] = defaultdict(list)
        for event in batch:
            by_node[event.node].append(event)
        async with trio.open_nursery() as nursery:
            for name, events in by_node.items():
                if name in self.running:
                    nursery.start_soon(self._publish_on, name, events)
                else:
                    self.refused[name] += len(events)

    async def _publish_on(self, name: str, events: list[Event]) -> None:
        async with connect(self.topology.nodes[name].address) as connection:
            channel = await connection.channel()
            await channel.confirm_select()
            for event in events:
                properties = commands.Basic.Properties(
                    message_id=f"{trio.current_time():.6f}",  # when it was sent, for its delay
                    delivery_mode=2 if event.persistent else 1,
                    headers=event.headers or None,
                    expiration=None if event.ttl_ms is None else str(event.ttl_ms),
                )
                body = Content.from_properties(properties, b"x" * event.size)
                channel.publish(event.exchange, event.routing_key, body, event.mandatory)
            await channel.wait_for_confirms()
        self.published[name] += len(events)

    # -- arrivals ------------------------------------------------------------------------------

    async def consume(self, name: str, queues: list[str]) -> None:
        """Consume the node's queues for as long as it runs, each delivery's delay kept; after
        a kill, again once it is restarted. Runs until cancelled."""
        while True:
            await self.started[name].wait()
            try:
                async with connect(self.topology.nodes[name].address) as connection:
                    channel = await connection.channel()
                    for queue in queues:
                        await channel.consume(queue, no_ack=True, consumer_tag=queue)
                    async for delivery in channel.deliveries():
                        sent = float(delivery.content.properties.message_id or "nan")
                        self.delays[(name, delivery.consumer_tag)].append(trio.current_time() - sent)
            except ClientError:
                pass  # killed (kill() has a new, unset event ready for the next run)

    # -- counters ------------------------------------------------------------------------------

    async def read_node(self, name: str) -> LiveCounts:
        """One node's counters: its queues' enqueued, its exchanges' published and dropped as
        looping, what its links and peerings carried each way (by the node at the far end, as
        that node names itself)."""
        node = self.topology.nodes[name]
        found = LiveCounts()
        async with ManagementClient.connect(node.address, REQUEST_TIMEOUT) as client:
            for record in await client.call("queues.list"):
                queue = (name, record["name"])
                if queue in self.passed_on:  # what stays: the simulation's deliveries there
                    found.queues[queue] = int(record["enqueued"]) - int(record["delivered"])
                elif queue in self.queues:
                    found.queues[queue] = int(record["enqueued"])
            found.bindings[name] = len(await client.call("bindings.list"))
            for record in await client.call("exchanges.list"):
                exchange = (name, record["name"])
                found.interest[exchange] = (record["interest"], record["interest_hops"])
                # (a built-in exchange counts where something was published into it, such as
                # a federation's amq.data; the management ones never do)
                if exchange in self.exchanges or (
                    record["published"] and record["name"] not in SYSTEM_EXCHANGES
                ):
                    found.exchanges[exchange] = int(record["published"])
                    if record["dropped_looping"]:
                        found.looped[exchange] = int(record["dropped_looping"])
            found.routes[name] = sorted(
                str(record.get("state")) for record in await client.call("routes.list")
            )
            carried = [
                (record.get("node"), record["messages_in"], record["messages_out"])
                for record in await client.call("links.list")
            ] + [
                (record.get("parent_node"), record["received"], record["forwarded"])
                for record in await client.call("federations.list")
            ]
            for peer, inbound, outbound in carried:
                if peer:
                    for link, count in ((link_id(peer, name), inbound), (link_id(name, peer), outbound)):
                        found.links[link] = found.links.get(link, 0) + int(count)
        return found

    async def read_all(self) -> LiveCounts:
        counts = LiveCounts()
        for name in list(self.running):
            add(counts, await self.read_node(name))
        return counts

    async def carrying(self, source: str, destination: str) -> bool:
        """Whether what flows from `source` to `destination` can: every connection that
        carries it is Operational, with the routes riding it (a route starts its session
        after its link is up): the destination's link to the source for its pull routes, the
        source's link to the destination for its push routes, and a peering between the two."""
        found = False
        for here, there, pushed in ((destination, source, False), (source, destination, True)):
            if here not in self.running:
                continue
            async with ManagementClient.connect(self.topology.nodes[here].address, REQUEST_TIMEOUT) as client:
                links, routes = await client.call("links.list"), await client.call("routes.list")
                federations = await client.call("federations.list")
            for link in links:
                if link.get("node") != there:
                    continue
                riding = [
                    route
                    for route in routes
                    if route_peer(route) == f"{link['host']}:{link['port']}"
                    and bool(route["src_local"]) == pushed
                ]
                if riding:
                    found = True
                    if any(record.get("state") != OPERATIONAL for record in [link, *riding]):
                        return False
            for peering in federations:
                if peering.get("parent_node") == there:
                    found = True
                    if peering.get("state") != OPERATIONAL:
                        return False
        return found

    async def quiescent(self, every_route: bool = False) -> None:
        """Wait until no count, binding, interest or route state moves for SETTLE seconds
        (every publish is confirmed by then); with `every_route`, until every route is
        Operational too (a route starts its session some time after its link is up)."""
        with trio.move_on_after(QUIESCENCE_TIMEOUT):
            last = None
            while True:
                now = await self.read_all()
                routes_up = all(state == OPERATIONAL for states in now.routes.values() for state in states)
                if now == last and (routes_up or not every_route):
                    return
                last = now
                await trio.sleep(SETTLE)
        raise ValidateFailed(f"the federation did not settle within {QUIESCENCE_TIMEOUT:g} s")

    async def wait_link(self, link: LinkId, at: float) -> None:
        """Wait until what flows over `link` can again (the model says it can from `at`)."""
        with trio.move_on_after(LINK_TIMEOUT):
            while not await self.carrying(*link_ends(link)):
                await trio.sleep(POLL)
            return
        raise ValidateFailed(
            f"link {link} was not back within {LINK_TIMEOUT:g} s of {at:g} s, when the model has it back"
        )


def add(total: LiveCounts, more: LiveCounts) -> None:
    """Add `more`'s counts into `total`."""
    for queue, count in more.queues.items():
        total.queues[queue] = total.queues.get(queue, 0) + count
    for link, count in more.links.items():
        total.links[link] = total.links.get(link, 0) + count
    for counts, more_counts in ((total.exchanges, more.exchanges), (total.looped, more.looped)):
        for exchange, count in more_counts.items():
            counts[exchange] = counts.get(exchange, 0) + count
    for node, count in more.bindings.items():
        total.bindings[node] = total.bindings.get(node, 0) + count
    total.interest.update(more.interest)
    total.routes.update(more.routes)


def steps(events: Iterator[Event]) -> Iterator[tuple[float, list[Event]]]:
    """The events grouped by their time, in order."""
    batch: list[Event] = []
    for event in events:
        if batch and event.time != batch[0].time:
            yield batch[0].time, batch
            batch = []
        batch.append(event)
    if batch:
        yield batch[0].time, batch


def queue_route_sources(topology: Topology) -> set[tuple[str, str]]:
    """(node, queue) of every queue a queue route takes its messages from."""
    return {(route.source, route.queue) for route in topology.routes if route.kind == "queue" and route.queue}


def consumed(topology: Topology) -> dict[str, list[str]]:
    """Per node, the scenario's queues validate consumes to measure delays: all but those a
    queue route takes its messages from (a consumer there would compete with the route)."""
    routed = queue_route_sources(topology)
    found: dict[str, list[str]] = defaultdict(list)
    for queue in topology.queues:
        if (queue.node, queue.name) not in routed:
            found[queue.node].append(queue.name)
    return found


class Wires:
    """A proxy between every two nodes, one per direction (topology.proxy): node X reaches node
    Y at proxies[(X, Y)], so validate cuts one link, or the links between two groups, by the
    proxies at its two ends, while it reads and publishes on the nodes' own ports."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.proxies = {
            (x, y): TcpProxy("127.0.0.1", topology.nodes[y].port)
            for x in topology.nodes
            for y in topology.nodes
            if x != y
        }

    async def start(self, nursery: trio.Nursery) -> None:
        for proxy in self.proxies.values():
            await nursery.start(proxy.serve)

    def view(self, name: str) -> Topology:
        """The topology as node `name` reaches the others: through its proxies."""
        nodes = {
            other: node if other == name else replace(node, port=self.proxies[(name, other)].port)
            for other, node in self.topology.nodes.items()
        }
        return replace(self.topology, nodes=nodes)

    def between(self, groups: tuple[tuple[str, ...], ...]) -> list[TcpProxy]:
        """The proxies of the links between nodes of different groups, both ways."""
        group_of = {name: number for number, group in enumerate(groups) for name in group}
        return [
            proxy
            for (x, y), proxy in self.proxies.items()
            if x in group_of and y in group_of and group_of[x] != group_of[y]
        ]


async def apply_through(wires: Wires) -> None:
    """Apply the topology node by node, each node's links and peerings made to the proxies of
    its view (its plan's changes to other nodes are theirs to make from their own view)."""
    for name in wires.topology.nodes:
        plan = await plan_topology(wires.view(name), prune=False, timeout=REQUEST_TIMEOUT)
        plan.changes = [change for change in plan.changes if change.node == name]
        plan.drift = [drift for drift in plan.drift if drift.node == name]
        result = await apply_plan(plan, say=lambda line: None)
        if not result.ok:
            raise ValidateFailed(f"applying {name}'s part of the topology: {result.failure}")


async def run_live(scenario: Scenario, var: Path, say: Say) -> LiveCounts:
    """Run the scenario on live nodes and return what they counted."""
    world = World(scenario)
    if len(world.topology.nodes) > MAX_NODES:
        raise ValidateFailed(
            f"{len(world.topology.nodes)} nodes: validate runs every node on this host, at most {MAX_NODES}"
        )
    topology = on_free_ports(world.topology)
    live = LiveRun(topology, var, say)
    wires = Wires(topology)
    try:
        async with trio.open_nursery() as nursery:
            await wires.start(nursery)
            async with trio.open_nursery() as starting:
                for name in topology.nodes:
                    starting.start_soon(live.start, name)
            await apply_through(wires)
            if not (await wait_connected(topology)).all_operational():
                raise ValidateFailed(
                    f"not every link was Operational {CONNECT_TIMEOUT:g} s after the topology was applied"
                )
            for name, queues in consumed(topology).items():
                nursery.start_soon(live.consume, name, queues)
            await live.quiescent(every_route=True)  # and dynamic interest advertised everywhere
            say(f"validate: {len(topology.nodes)} nodes up on loopback, data and logs in {var}")
            await _drive(scenario, world, live, wires)
            say("validate: waiting for the federation to settle")
            await live.quiescent()
            counts = await live.read_all()
            add(counts, live.before)
            counts.published = dict(live.published)
            counts.refused = dict(live.refused)
            counts.delays = dict(live.delays)
            nursery.cancel_scope.cancel()
        return counts
    finally:
        await live.stop_all()


def _groups(groups: tuple[tuple[str, ...], ...]) -> str:
    return " | ".join(",".join(group) for group in groups)


async def _drive(scenario: Scenario, world: World, live: LiveRun, wires: Wires) -> None:
    clock = Clock()
    pending = moments(scenario, world.recovery())

    async def happen_until(at: float) -> None:
        while pending and pending[0].at <= at:
            moment = pending.pop(0)
            await clock.wait_until(moment.at)
            if moment.action == "kill":
                async with clock.stopped():
                    await live.quiescent()
                await live.kill(moment.node)
            elif moment.action == "restart":
                await live.spawn(moment.node)
            elif moment.action == "ready":
                await live.ready(moment.node)
                late(moment, f"{moment.node} ready")
            elif moment.action in ("cut", "partition"):
                async with clock.stopped():
                    await live.quiescent()
                for proxy in wires.between(moment.groups):
                    if moment.action == "cut":
                        proxy.sever()  # both ends see their connections end
                    else:
                        proxy.partition()  # silent: only heartbeats tell
                live.say(f"validate: {moment.action} {_groups(moment.groups)} at {clock.now():.1f} s")
            elif moment.action == "heal":
                for proxy in wires.between(moment.groups):
                    proxy.close_all()  # what went silent is not picked up again (held attempts go on)
                    proxy.restore()
                live.say(f"validate: healed {_groups(moment.groups)} at {clock.now():.1f} s")
            else:
                await live.wait_link(moment.link, moment.at)
                late(moment, f"link {moment.link} back")

    def late(moment: Moment, what: str) -> None:
        """Say so when the live federation got where the model has it later than the model:
        the publishes due meanwhile went out late, in the state the model gives their time."""
        behind = clock.now() - moment.at
        if behind > LATE:
            live.say(f"validate: {what} {behind:.1f} s after the model's {moment.at:g} s")

    for at, batch in steps(scenario_events(scenario)):
        await happen_until(at)
        await clock.wait_until(at)
        await live.publish(batch)
    await happen_until(float("inf"))


def validate(scenario: Scenario, var: Path, say: Say) -> LiveCounts:
    """The live run (see the module); LiveRunFailed when it cannot follow the scenario."""
    try:
        return trio.run(run_live, scenario, var, say)
    except* (processes.StartFailed, LiveRunFailed, ManagementFailed, ClientError) as group:
        raise ValidateFailed("; ".join(str(error) for error in leaves(group))) from None
