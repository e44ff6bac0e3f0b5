"""A node whose data dir fills up, on a small tmpfs (root only): the disk alarm holds
publishers with Connection.Blocked while consumers and management go on, and a store write that
fails on a full disk nacks its publishes instead of killing the node.

The tests decide when the disk is full with a filler file (tests.tmpfs.fill), and make space
return by deleting it or by draining queues: SQLite does not give the space of consumed
messages back to the filesystem but reuses it, and the alarm counts it as free.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.nodes import NodeProcess
from tests.tmpfs import fill, small_tmpfs

BIN = Path(sys.executable).parent
#: Bounds every wait in these tests; none is expected to come near it.
TIMEOUT = 30.0
BODY = 32 * 1024
LIMIT = 4_000_000


def body(n: int) -> bytes:
    return b"%08d" % n + b"x" * (BODY - 8)


def number(payload: bytes) -> int:
    return int(payload[:8])


def wait_until(fact: Callable[[], bool], what: str, node: NodeProcess) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not fact():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {TIMEOUT}s; node log:\n{node.log()[-4000:]}")
        time.sleep(0.02)


class Publisher:
    """A pika connection that publishes persistent messages with confirms and records
    Connection.Blocked and Unblocked."""

    def __init__(self, node: NodeProcess, queue: str) -> None:
        parameters = pika.URLParameters(node.url())
        parameters.blocked_connection_timeout = 2 * TIMEOUT
        self.connection = pika.BlockingConnection(parameters)
        self.connection.add_on_connection_blocked_callback(self._blocked)
        self.connection.add_on_connection_unblocked_callback(self._unblocked)
        self.channel = self.connection.channel()
        self.channel.queue_declare(queue, durable=True)
        self.channel.confirm_delivery()
        self.queue = queue
        self.blocked: list[str] = []
        self.unblocked = 0
        self.confirmed: list[int] = []
        self.nacked: list[int] = []

    def _blocked(self, connection: Any, frame: Any) -> None:
        self.blocked.append(frame.method.reason)

    def _unblocked(self, connection: Any, frame: Any) -> None:
        self.unblocked += 1

    @property
    def is_blocked(self) -> bool:
        return len(self.blocked) > self.unblocked

    def publish(self, n: int) -> bool:
        """Publish message n and wait for its confirm; True if acked."""
        try:
            self.channel.basic_publish(
                "", self.queue, body(n), pika.BasicProperties(delivery_mode=2), mandatory=True
            )
        except pika.exceptions.NackError:
            self.nacked.append(n)
            return False
        self.confirmed.append(n)
        self.connection.process_data_events(0)  # runs the blocked/unblocked callbacks
        return True

    def wait(self, fact: Callable[[], bool], what: str, node: NodeProcess) -> None:
        """Wait for `fact`, letting pika read (and run callbacks) meanwhile."""

        def seen() -> bool:
            self.connection.process_data_events(0)
            return fact()

        wait_until(seen, what, node)

    def close(self) -> None:
        """Close, unless held: the node reads nothing from a held connection, not even a
        Close, so a failed test leaves it to the node's shutdown."""
        if self.connection.is_open and not self.is_blocked:
            self.connection.close()


def drain(node: NodeProcess, queue: str) -> list[int]:
    """Consume (and ack) every message in `queue` on a connection of its own."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url()))
    try:
        channel = connection.channel()
        got = []
        while True:
            method, _, payload = channel.basic_get(queue)
            if method is None:
                return got
            got.append(number(payload))
            channel.basic_ack(method.delivery_tag)
    finally:
        connection.close()


def queues_listed(node: NodeProcess) -> str:
    """`amq-config queues`: a management request, answered while publishers are held."""
    result = subprocess.run(
        [str(BIN / "amq-config"), "-a", f"127.0.0.1:{node.port}", "queues", "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def publish_until_blocked(publisher: Publisher, node: NodeProcess) -> int:
    """Publish messages 1, 2, ... until the node holds the publisher; returns how many were
    published (every one of them confirmed)."""
    n = 0
    while not publisher.is_blocked:
        assert n < 500, f"never blocked; node log:\n{node.log()[-4000:]}"
        n += 1
        assert publisher.publish(n), f"message {n} nacked before the alarm"
    return n


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "16m") as mounted:
        yield mounted


def test_low_disk_blocks_publishers_until_space_returns(
    disk: Path, nodes: Callable[..., NodeProcess]
) -> None:
    node = nodes("disk", "--disk-free-limit", f"{LIMIT}", data_dir=disk / "data")
    filler = fill(disk, LIMIT + 1_500_000)
    publisher = Publisher(node, "work")
    try:
        n = publish_until_blocked(publisher, node)
        assert publisher.blocked == [publisher.blocked[0]] and "disk" in publisher.blocked[0]
        assert "disk alarm set" in node.log()

        # Held: consumers drain and ack, management answers, the node stays up.
        delivered = drain(node, "work")
        assert delivered == publisher.confirmed
        assert "work" in queues_listed(node)
        assert node.process.poll() is None and publisher.is_blocked

        filler.unlink()
        publisher.wait(lambda: publisher.unblocked == 1, "Connection.Unblocked", node)
        assert "disk alarm cleared" in node.log()
        for more in range(n + 1, n + 11):
            assert publisher.publish(more)
        assert drain(node, "work") == publisher.confirmed[len(delivered) :]
    finally:
        publisher.close()


def test_draining_the_queues_that_filled_the_disk_clears_the_alarm(
    disk: Path, nodes: Callable[..., NodeProcess]
) -> None:
    """No space comes back to the filesystem (the filler stays): the pages consumed messages
    leave free inside the store are what the alarm sees return."""
    node = nodes("disk", "--disk-free-limit", f"{LIMIT}", data_dir=disk / "data")
    fill(disk, LIMIT + 3_000_000)
    publisher = Publisher(node, "work")
    try:
        n = publish_until_blocked(publisher, node)
        assert n > 20, "the store should have grown by megabytes before the alarm"
        assert drain(node, "work") == publisher.confirmed
        publisher.wait(lambda: publisher.unblocked == 1, "Connection.Unblocked after draining", node)
        assert "disk alarm cleared" in node.log()
        assert publisher.publish(n + 1)
        assert drain(node, "work") == [n + 1]
    finally:
        publisher.close()


def test_a_write_that_fills_the_disk_is_nacked_and_the_node_serves_on(
    disk: Path, nodes: Callable[..., NodeProcess]
) -> None:
    node = nodes("disk", "--disk-free-limit", "0", data_dir=disk / "data")
    publisher = Publisher(node, "work")
    for n in range(1, 4):
        assert publisher.publish(n)
    filler = fill(disk, 0)
    try:
        while not publisher.nacked:
            assert n < 500, f"never nacked; node log:\n{node.log()[-4000:]}"
            n += 1
            publisher.publish(n)
        assert "database or disk is full" in node.log()
        assert node.process.poll() is None
        assert "work" in queues_listed(node)

        filler.unlink()
        while not publisher.publish(n := n + 1):  # the first may land in a batch still failing
            assert n < 1000
        for more in range(n + 1, n + 6):
            assert publisher.publish(more)
        assert not publisher.is_blocked
    finally:
        publisher.close()
    assert node.stop() == 0

    # Every confirmed message survived the restart; the nacked ones were given up (kept in
    # memory only, as transient messages), so they are gone.
    node = nodes("disk", "--disk-free-limit", "0", data_dir=disk / "data")
    assert drain(node, "work") == publisher.confirmed
    assert publisher.nacked and publisher.confirmed[:3] == [1, 2, 3]
