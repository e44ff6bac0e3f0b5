"""A node process with a low memory high watermark and a publisher with no consumer: the
publisher is held with Connection.Blocked while the node's memory stays near the watermark,
management and consumers go on, and once a consumer has drained the queue the publisher is
released, every message delivered.

Before the memory alarm, the same publisher grew the node without bound (1 MB messages: about
330 MB/s until the kernel killed it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.test_disk_full import BIN, Publisher, drain, queues_listed
from tests.nodes import NodeProcess, start_node

MiB = 2**20
WATERMARK = 160 * MiB
BODY = MiB
#: Past the watermark a connection may publish once more, and readings come a budget apart:
#: the node may go over by a few messages, not by a queue's worth.
OVERSHOOT = 48 * MiB


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class BigPublisher(Publisher):
    """Transient messages of BODY bytes, each confirmed before the next."""

    def publish(self, n: int) -> bool:
        self.channel.basic_publish("", self.queue, b"%08d" % n + b"x" * (BODY - 8))
        self.confirmed.append(n)
        self.connection.process_data_events(0)  # runs the blocked/unblocked callbacks
        return True


def test_a_publisher_without_consumer_is_held_at_the_watermark_and_released_once_drained(
    tmp_path: Path,
) -> None:
    node = start_node(tmp_path, "--memory-high-watermark", f"{WATERMARK // MiB}MiB")
    publisher = BigPublisher(node, "mem")
    try:
        n = 0
        while not publisher.is_blocked:
            assert n < 3 * WATERMARK // BODY, f"never blocked; node log:\n{node.log()[-4000:]}"
            n += 1
            publisher.publish(n)
        (reason,) = publisher.blocked
        assert reason.startswith("low on memory: the node uses ")
        assert reason.endswith(f"its memory_high_watermark is {WATERMARK}")
        assert resident(node.process.pid) < WATERMARK + OVERSHOOT
        assert "memory alarm set" in node.log()
        # Held, not stuck: management answers (and shows the alarm), and a consumer takes
        # everything published.
        assert "mem" in queues_listed(node)
        status = amq_config(node, "node")
        assert "alarm ON: publishers held" in status and "(1 blocked)" in status, status
        assert sorted(drain(node, "mem")) == list(range(1, n + 1))
        publisher.wait(lambda: not publisher.is_blocked, "Connection.Unblocked after the drain", node)
        assert "memory alarm cleared" in node.log()
        publisher.publish(n + 1)  # confirmed (basic_publish raises on a nack)
        assert drain(node, "mem") == [n + 1]
    finally:
        publisher.close()
        node.stop()


def amq_config(node: NodeProcess, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "amq-config"), "-a", f"127.0.0.1:{node.port}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_watermark_flag_is_checked_before_the_node_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--memory", "--memory-high-watermark", "40%"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("amq-gateway: error: --memory-high-watermark: expected a fraction")
