"""The memory alarm against a memory reading the test sets, on the broker model."""

from __future__ import annotations

import logging

import pytest

from gateway.broker import Broker
from gateway.broker.message import MESSAGE_OVERHEAD
from gateway.memoryalarm import MIN_BUDGET, MemoryAlarm, available_memory, resident_bytes
from gateway.names import MANAGEMENT_EXCHANGE

from .broker_fakes import Client

MiB = 2**20


class Memory:
    """A resident-size reading the test sets; counts readings and releases of free memory."""

    def __init__(self, used: int) -> None:
        self.used = used
        self.readings = 0
        self.releases = 0

    def __call__(self) -> int:
        self.readings += 1
        return self.used

    def release(self) -> None:
        self.releases += 1


def alarm_on(broker: Broker, memory: Memory, watermark: int = 100 * MiB) -> MemoryAlarm:
    alarm = MemoryAlarm(broker, watermark, memory, memory.release)
    alarm.check()
    return alarm


def test_the_alarm_holds_every_publisher_above_the_watermark_and_releases_under_the_resume_mark(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.memory")
    broker = Broker()
    memory = Memory(50 * MiB)
    alarm = alarm_on(broker, memory)
    publisher = Client(broker)
    publisher.declare("q")
    publisher.publish("", "q")  # transient: the disk alarm would not hold it, this one does
    assert broker.memory_hold is None and publisher.outbox.blocked is None
    memory.used = 100 * MiB
    alarm.check()
    hold = broker.memory_hold
    assert hold is not None
    assert (
        hold.reason
        == f"low on memory: the node uses {100 * MiB} bytes, its memory_high_watermark is {100 * MiB}"
    )
    publisher.publish("", "nowhere")  # even an unroutable publish: the connection is held after it
    assert publisher.outbox.blocked == hold.reason
    memory.used = 95 * MiB  # under the watermark, over the resume mark (0.9 of it)
    alarm.check()
    assert broker.memory_hold is hold and publisher.outbox.blocked == hold.reason
    memory.used = 89 * MiB
    alarm.check()
    assert broker.memory_hold is None and publisher.outbox.blocked is None
    assert memory.releases == 2  # freed memory handed back before each reading while on
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory alarm")] == [
        f"memory alarm set: the node uses {100 * MiB} bytes, over its memory_high_watermark of"
        f" {100 * MiB} bytes; holding publishers until it is under {90 * MiB} bytes",
        f"memory alarm cleared: the node uses {89 * MiB} bytes, under {90 * MiB} bytes"
        f" (memory_high_watermark {100 * MiB}); publishers resume",
    ]


def test_publishes_that_could_cross_the_watermark_trigger_a_reading_at_once() -> None:
    """Between timed readings, the model counts what publishes add: a burst of large messages
    is stopped within one reading's worth of bytes."""
    broker = Broker()
    memory = Memory(100 * MiB - 3 * MiB)
    alarm_on(broker, memory)
    assert broker.memory_budget == 3 * MiB and memory.readings == 1
    publisher = Client(broker)
    publisher.declare("q")
    body = b"x" * MiB
    publisher.publish("", "q", body)
    publisher.publish("", "q", body)
    assert memory.readings == 1
    assert broker.memory_budget == MiB - 2 * MESSAGE_OVERHEAD
    memory.used = 100 * MiB  # what the three messages really cost
    publisher.publish("", "q", body)
    assert memory.readings == 2  # the budget ran out: read now, not at the next timed reading
    assert broker.memory_hold is not None and publisher.outbox.blocked is not None
    assert broker.memory_budget == MIN_BUDGET


def test_bodies_being_received_are_held_below_the_watermark_once_they_weigh() -> None:
    """Unfinished bodies spend the memory budget as they arrive; from 0.9 of the watermark,
    while they take a tenth of it or more, a connection receiving more is held (whole
    messages still go on), until the node is under 0.9 of that mark."""
    broker = Broker()
    memory = Memory(80 * MiB)
    alarm = alarm_on(broker, memory)
    assert broker.memory_budget == 10 * MiB  # to the content mark, 90 MiB
    large, partial, publisher = Client(broker), Client(broker), Client(broker)
    publisher.declare("q")
    large.session.receiving(5 * MiB)
    partial.session.receiving(3 * MiB)
    assert memory.readings == 1 and broker.unfinished == 8 * MiB
    memory.used = 91 * MiB
    partial.session.receiving(6 * MiB)  # the budget is spent: read at once
    assert memory.readings == 2 and broker.content_hold is not None and broker.memory_hold is None
    hold = broker.content_hold
    assert "message bodies still being received" in hold.reason
    # 11 MiB unfinished, over a tenth of the watermark: the one that just received more waits.
    assert partial.outbox.blocked == hold.reason and large.outbox.blocked is None
    large.session.receiving(0)  # its message is whole: published, not held
    assert broker.unfinished == 6 * MiB
    large.session.receiving(MiB)  # under a tenth of the watermark: a large message goes on
    assert large.outbox.blocked is None
    publisher.publish("", "q")
    assert publisher.outbox.blocked is None  # whole messages go on below the watermark
    memory.used = 82 * MiB  # under the watermark's resume mark, over the content one (81 MiB)
    alarm.check()
    assert partial.outbox.blocked is not None
    memory.used = 80 * MiB
    alarm.check()
    assert broker.content_hold is None and partial.outbox.blocked is None
    partial.session.disconnect()
    assert broker.unfinished == MiB


def test_management_requests_are_never_held() -> None:
    broker = Broker()
    answered: list[bytes] = []
    broker.exchange_handlers[MANAGEMENT_EXCHANGE] = lambda session, content: answered.append(content.body)
    alarm_on(broker, Memory(200 * MiB))
    admin = Client(broker)
    admin.publish(MANAGEMENT_EXCHANGE, "", b"request")
    assert answered == [b"request"] and admin.outbox.blocked is None


def test_an_unreadable_memory_reading_leaves_the_alarm_as_it_was(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise OSError(2, "No such file or directory")

    broker = Broker()
    MemoryAlarm(broker, 100 * MiB, broken, lambda: None).check()
    assert broker.memory_hold is None and broker.memory_budget == MIN_BUDGET
    assert "cannot read the node's memory use" in caplog.text


def test_this_machines_readings_are_plausible() -> None:
    used = resident_bytes()
    assert 10 * MiB < used < available_memory()
