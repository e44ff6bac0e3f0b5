"""Message bodies in the store instead of memory (gateway.broker.paging), with node processes:
a backlog of persistent messages piles up without the node's memory following it, and a node
restarts with more stored messages than its memory and delivers them all, bodies read back in
batches ahead of the consumer; transient messages beyond a flow_to_disk queue's limit or a
queue's memory budget go to the spill file and come back the same way.

Before, every body stayed in memory: 384 MiB of messages took the node over 400 MiB, and under
the restart test's `prlimit --as` cap the node failed to start (MemoryError loading the store)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.test_disk_full import queues_listed
from tests.integration.test_memory_alarm import amq_config, resident
from tests.nodes import NodeProcess, start_node

MiB = 2**20
#: The node's address-space cap (prlimit --as): Python, Trio and the node take about 55 MiB of
#: it before any message, and the store's worker threads their stacks.
CAP = 128 * MiB
STORED = 3 * CAP // MiB  # messages of 1 MiB: three times the cap


def status_bytes(node: NodeProcess, field: str) -> int:
    """A size from the node's /proc status (VmHWM: peak resident; VmPeak: peak address space)."""
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def peak_resident(node: NodeProcess) -> int:
    return status_bytes(node, "VmHWM")


def numbers_consumed(channel: BlockingChannel, queue: str, node: NodeProcess) -> list[int]:
    """Consume STORED messages of 1 MiB (4 unacked at most) and return the number each starts with."""
    channel.basic_qos(prefetch_count=4)
    got = []
    for method, _, body in channel.consume(queue, inactivity_timeout=30):
        assert method is not None, f"{len(got)} of {STORED} delivered; node log:\n{node.log()[-3000:]}"
        assert len(body) == MiB
        got.append(int(body[:8]))
        channel.basic_ack(method.delivery_tag)
        if len(got) == STORED:
            break
    channel.cancel()
    return got


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_a_data_dir_three_times_the_memory_cap_restarts_and_is_delivered(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(tmp_path, data_dir=data_dir, name="paged")
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = connection.channel()
    channel.queue_declare("stored", durable=True)
    channel.confirm_delivery()
    for n in range(STORED):
        channel.basic_publish(
            "", "stored", b"%08d" % n + b"x" * (MiB - 8), pika.BasicProperties(delivery_mode=2)
        )
    connection.close()
    assert node.stop() == 0
    node = start_node(tmp_path, data_dir=data_dir, name="paged", prefix=["prlimit", f"--as={CAP}"])
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url()))
        channel = connection.channel()
        assert numbers_consumed(channel, "stored", node) == list(range(STORED))
        connection.close()
        assert resident(node) < CAP
        assert "MemoryError" not in node.log()
    finally:
        node.stop()


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"qpid.max_size": 4 * MiB, "qpid.policy_type": "flow_to_disk"}, id="flow_to_disk"),
        pytest.param({}, id="memory-budget"),
    ],
)
def test_transient_messages_three_times_the_memory_cap_pile_up_on_disk(
    tmp_path: Path, arguments: dict[str, object]
) -> None:
    """Before, the node's memory followed the backlog: MemoryError under the cap (or a
    refused declare for flow_to_disk). A watermark of the whole cap keeps the memory alarm
    from holding the publisher: what holds the memory down here is the spill file."""
    node = start_node(
        tmp_path, "--memory-high-watermark", "1.0", name="spill", prefix=["prlimit", f"--as={CAP}"]
    )
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url()))
        channel = connection.channel()
        channel.queue_declare("transient", arguments=arguments)
        channel.confirm_delivery()
        for n in range(STORED):
            channel.basic_publish("", "transient", b"%08d" % n + b"x" * (MiB - 8))
        listing = next(line for line in queues_listed(node).splitlines() if line.endswith(" transient"))
        messages, total, on_disk = (int(field) for field in listing.split()[4:7])
        assert (messages, total) == (STORED, STORED * MiB)
        assert on_disk >= total - 20 * MiB, listing  # all but the queue's memory budget
        spill = next(line for line in amq_config(node, "node").splitlines() if line.startswith("Spill:"))
        assert int(spill.split()[1]) >= STORED - 20, spill  # the same bodies, counted by the file
        assert numbers_consumed(channel, "transient", node) == list(range(STORED))
        connection.close()
        assert peak_resident(node) < CAP
        # The login's password check runs on a thread: with a heap of its own (64 MiB of address
        # space) the node sat at the cap, and a 1 MB message now and then failed (MemoryError).
        assert status_bytes(node, "VmPeak") < CAP - 16 * MiB
        assert "MemoryError" not in node.log()
    finally:
        node.stop()
