"""The benchmark scenarios and the topology each one needs on the broker."""

from __future__ import annotations

from dataclasses import dataclass

from pamqp import commands

from .wire import Connection

TOPIC_BINDINGS = 1000
PACED_RATE = 10_000


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    confirms: bool = False
    persistent: bool = False  # delivery_mode 2 to a durable queue
    topic_bindings: int = 0  # > 0: publish through a topic exchange with this many bindings
    rate: int | None = None  # paced run (latency); None = throughput

    @property
    def queue(self) -> str:
        return f"bench.{self.key}"

    @property
    def exchange(self) -> str:
        return f"bench.{self.key}.x" if self.topic_bindings else ""

    @property
    def routing_key(self) -> str:
        # Matches exactly one binding, bench.<n/2>.*, out of the n distinct patterns.
        return f"bench.{self.topic_bindings // 2}.key" if self.topic_bindings else self.queue


SCENARIOS = (
    Scenario("transient", "transient, default exchange, no confirms"),
    Scenario("confirms", "transient, publisher confirms (1000 in flight)", confirms=True),
    Scenario("persistent", "persistent to durable queue, confirms", confirms=True, persistent=True),
    Scenario("topic", f"topic exchange, {TOPIC_BINDINGS} bindings", topic_bindings=TOPIC_BINDINGS),
    Scenario("paced", f"paced {PACED_RATE:,} msg/s (latency)", rate=PACED_RATE),
)


def declare(conn: Connection, s: Scenario) -> None:
    """Create the scenario's queue (empty) and, for topic, its exchange and bindings."""
    conn.call(commands.Queue.Declare(queue=s.queue, durable=s.persistent))
    conn.call(commands.Queue.Purge(queue=s.queue))
    if s.topic_bindings:
        conn.call(commands.Exchange.Declare(exchange=s.exchange, exchange_type="topic"))
        conn.call_many(
            [
                commands.Queue.Bind(queue=s.queue, exchange=s.exchange, routing_key=f"bench.{i}.*")
                for i in range(s.topic_bindings)
            ]
        )


def remove(conn: Connection, s: Scenario) -> None:
    """Delete what declare made, so one scenario's leftovers never weigh on the next."""
    conn.call(commands.Queue.Delete(queue=s.queue))
    if s.topic_bindings:
        conn.call(commands.Exchange.Delete(exchange=s.exchange))
