"""Node processes and a publisher with no consumer: the memory alarm holds the publisher with
Connection.Blocked while the node's memory stays near its watermark, management and consumers
go on, and once a consumer has drained the queue the publisher is released, every message
delivered.

Before the memory alarm, the same publisher grew the node without bound (1 MB messages: about
330 MB/s) until the kernel killed it; under `prlimit --as` a MemoryError dropped the
publisher's connection and what it had sent."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from tests.integration.test_disk_full import BIN, TIMEOUT, Publisher, drain, queues_listed
from tests.nodes import NodeProcess, start_node

MiB = 2**20
#: Past the watermark a connection may publish once more, and readings come a budget apart:
#: the node may go over by a few messages, not by a queue's worth.
OVERSHOOT = 48 * MiB


#: Every body stays in memory (no paging to the spill file), so what holds the node's memory
#: down in these tests is the alarm.
BODIES_IN_MEMORY = ("--queue-memory-budget", "1GiB")


def resident(node: NodeProcess) -> int:
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def watermark(node: NodeProcess) -> int:
    """The watermark in bytes, from the node's start-up line."""
    for line in node.log().splitlines():
        if "memory high watermark: " in line:
            return int(line.split("memory high watermark: ")[1].split()[0])
    raise AssertionError(f"no watermark logged:\n{node.log()}")


def amq_config(node: NodeProcess, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "amq-config"), "-a", f"127.0.0.1:{node.port}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Flood(Publisher):
    """Publishes transient messages of `size` bytes, `batch` per call (confirmed one by one
    when batch is 1, else unconfirmed, as a fire-and-forget publisher does)."""

    def __init__(self, node: NodeProcess, queue: str, size: int, batch: int) -> None:
        super().__init__(node, queue)
        self.size = size
        self.batch = batch
        self.sent = 0
        if batch > 1:
            self.channel.close()  # its replacement is not in confirm mode
            self.channel = self.connection.channel()

    def publish_batch(self) -> None:
        for _ in range(self.batch):
            self.sent += 1
            body = b"%08d" % self.sent + b"x" * (self.size - 8)
            self.channel.basic_publish("", self.queue, body)
        self.connection.process_data_events(0)  # runs the blocked/unblocked callbacks


def drain_all(node: NodeProcess, queue: str, publisher: Flood) -> list[int]:
    """Consume until every message sent has arrived (those still in the publisher's socket
    when the node held it are read once it is released)."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=2000)
        got: list[int] = []
        for method, _, body in channel.consume(queue, inactivity_timeout=TIMEOUT):
            assert method is not None, (
                f"{len(got)} of {publisher.sent} within {TIMEOUT}s:\n{node.log()[-4000:]}"
            )
            got.append(int(body[:8]))
            if len(got) % 1000 == 0 or len(got) == publisher.sent:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if len(got) == publisher.sent:
                channel.cancel()
                return got
        raise AssertionError("the consumer ended")
    finally:
        connection.close()


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize(("size", "batch"), [(100, 2000), (MiB, 1)], ids=["100B", "1MB"])
def test_a_node_under_an_address_space_limit_holds_a_publisher_without_consumer_and_survives(
    tmp_path: Path, size: int, batch: int
) -> None:
    """The default watermark is 0.4 of the memory available, here the `prlimit --as` cap."""
    cap = 320 * MiB
    node = start_node(tmp_path, *BODIES_IN_MEMORY, prefix=["prlimit", f"--as={cap}"])
    mark = watermark(node)
    assert mark == int(0.4 * cap)
    publisher = Flood(node, "mem", size, batch)
    try:
        while not publisher.is_blocked:
            assert publisher.sent < 3 * mark // size, f"never blocked; node log:\n{node.log()[-4000:]}"
            publisher.publish_batch()
        (reason,) = publisher.blocked
        assert reason.startswith("low on memory: the node uses ")
        assert reason.endswith(f"its memory_high_watermark is {mark}")
        assert resident(node) < mark + OVERSHOOT
        assert node.process.poll() is None and "MemoryError" not in node.log()
        # Held, not stuck: management answers (and shows the alarm), and a consumer takes
        # everything published.
        assert "mem" in queues_listed(node)
        # Whether the alarm is still on by now depends on how much memory the node has given
        # back since (RSS near the resume mark), so only the reading is checked here.
        status = amq_config(node, "node")
        assert f"high watermark {mark / MiB:.1f} MiB" in status, status
        assert sorted(drain_all(node, "mem", publisher)) == list(range(1, publisher.sent + 1))
        publisher.wait(lambda: not publisher.is_blocked, "Connection.Unblocked after the drain", node)
        assert "memory alarm cleared" in node.log()
        log = node.log()
        assert "CHN-1005 : Flow Control Enforced (low on memory: " in log
        assert log.index("CHN-1006 : Flow Control Removed") > log.index("CHN-1005 : Flow Control Enforced")
    finally:
        publisher.close()
        node.stop()


def test_an_absolute_watermark_from_the_flag(tmp_path: Path) -> None:
    node = start_node(tmp_path, "--memory-high-watermark", "160MiB", *BODIES_IN_MEMORY)
    assert watermark(node) == 160 * MiB
    publisher = Flood(node, "mem", MiB, 1)
    try:
        while not publisher.is_blocked:
            assert publisher.sent < 480, f"never blocked; node log:\n{node.log()[-4000:]}"
            publisher.publish_batch()
        assert resident(node) < 160 * MiB + OVERSHOOT
        drain_all(node, "mem", publisher)
        publisher.wait(lambda: not publisher.is_blocked, "Connection.Unblocked after the drain", node)
        publisher.publish_batch()  # confirmed: basic_publish raises on a nack
        assert drain(node, "mem") == [publisher.sent]
    finally:
        publisher.close()
        node.stop()


def test_the_watermark_flag_is_checked_before_the_node_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--memory", "--memory-high-watermark", "40%"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("amq-gateway: error: --memory-high-watermark: expected a fraction")
