"""`amq-gateway up --traffic N`: each declared publisher sends N messages, and every queue shows
how many arrived against how many the topology says should (topology.flow), so an operator
sees at once that messages cross the federation, and where they do not.

Arrivals are queue depths after minus before, read through management: a queue with its own
consumers would undercount, so the demo's queues have none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import trio
from pamqp import commands

from federation.client import connect
from federation.formatting import table
from federation.management_client import ManagementClient
from gateway.wire import Content
from topology.flow import reached_queues
from topology.model import Node, Publisher, Topology

#: Seconds to wait for every expected message to arrive.
ARRIVAL_TIMEOUT = 20.0
#: Seconds between depth readings while waiting.
POLL = 0.2
#: Seconds the counts must stay as expected, so a late duplicate is seen too.
SETTLE = 1.0

QueueAt = tuple[str, str]  # (node, queue)


@dataclass(frozen=True)
class TrafficReport:
    """How many messages each queue should have got and did get."""

    count: int
    publishers: int
    expected: Counter[QueueAt]
    arrived: Counter[QueueAt]

    @property
    def ok(self) -> bool:
        return self.expected == +self.arrived

    def lines(self) -> list[str]:
        """One row per queue that should get or got messages, then the verdict."""
        rows = [
            [node, queue, str(self.expected[(node, queue)]), str(self.arrived[(node, queue)])]
            for node, queue in sorted(self.expected.keys() | (+self.arrived).keys())
        ]
        columns = (("Node", 12), ("Queue", 12), ("Expected", 10), ("Arrived", 0))
        differing = sum(
            self.expected[row] != self.arrived[row] for row in self.expected.keys() | self.arrived.keys()
        )
        verdict = (
            "every message arrived where the topology sends it"
            if self.ok
            else f"MISMATCH in {differing} queue(s): not what the topology sends there"
        )
        heading = f"Traffic: {self.count} message(s) from each of {self.publishers} publisher(s):"
        return ["", heading, "", *table(columns, rows), "", f"Traffic: {verdict}."]


async def depths(topology: Topology, timeout: float) -> Counter[QueueAt]:
    """Messages ready in every declared queue, read from every node at once."""
    found: Counter[QueueAt] = Counter()

    async def read(node: Node) -> None:
        declared = {queue.name for queue in topology.queues if queue.node == node.name}
        async with ManagementClient.connect(node.address, timeout) as client:
            for record in await client.call("queues.list"):
                if record["name"] in declared:
                    found[(node.name, record["name"])] = int(record["messages"])

    async with trio.open_nursery() as nursery:
        for node in topology.nodes.values():
            nursery.start_soon(read, node)
    return found


async def publish(topology: Topology, publisher: Publisher, count: int, timeout: float) -> None:
    """`count` persistent messages from one publisher, confirmed by its node."""
    properties = commands.Basic.Properties(delivery_mode=2, app_id="amq-gateway up")
    with trio.fail_after(timeout):
        async with connect(topology.nodes[publisher.node].address) as connection:
            channel = await connection.channel()
            await channel.confirm_select()
            for number in range(count):
                body = f"{publisher.node} {publisher.exchange} {publisher.key} #{number}".encode()
                channel.publish(publisher.exchange, publisher.key, Content.from_properties(properties, body))
            await channel.wait_for_confirms()


def expected_arrivals(topology: Topology, publishers: Iterable[Publisher], count: int) -> Counter[QueueAt]:
    expected: Counter[QueueAt] = Counter()
    for publisher in publishers:
        for queue_at in reached_queues(topology, publisher):
            expected[queue_at] += count
    return expected


async def send_traffic(topology: Topology, count: int, timeout: float = 10.0) -> TrafficReport:
    """Publish `count` messages per publisher and wait (bounded) until the expected arrived."""
    expected = expected_arrivals(topology, topology.publishers, count)
    before = await depths(topology, timeout)
    for publisher in topology.publishers:
        await publish(topology, publisher, count, timeout)
    arrived: Counter[QueueAt] = Counter()
    matched_once = False
    with trio.move_on_after(ARRIVAL_TIMEOUT):
        while True:
            after = await depths(topology, timeout)
            arrived = Counter({queue_at: after[queue_at] - before[queue_at] for queue_at in after})
            if expected == +arrived:
                if matched_once:  # still equal after SETTLE: no late duplicate came
                    break
                matched_once = True
                await trio.sleep(SETTLE)
                continue
            matched_once = False
            await trio.sleep(POLL)
    return TrafficReport(count, len(topology.publishers), expected, arrived)
