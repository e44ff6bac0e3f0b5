"""gateway.pump over trio's testing streams and a stand-in wire: every wait ends on an event or
a deadline of Trio's clock (virtual here), never on a poll."""

from __future__ import annotations

import trio
import trio.testing

from gateway.pump import Pump

HEARTBEAT = b"<hb>"


class FakeWire:
    """The pump's Wire: output queued by the test, input recorded."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.out: list[bytes] = []

    def receive_data(self, data: bytes) -> None:
        self.received.append(data)

    def data_to_send(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def pending_output(self) -> int:
        return sum(map(len, self.out))

    def send_heartbeat(self) -> None:
        self.out.append(HEARTBEAT)


async def test_drain_waits_for_the_writer_to_send_everything(nursery: trio.Nursery) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()  # send_all waits for the reader
    wire = FakeWire()
    pump = Pump(ours, wire)
    nursery.start_soon(pump.write_loop)
    wire.out.append(b"x" * 100)
    drained = trio.Event()

    async def drain() -> None:
        await pump.drain()
        drained.set()

    nursery.start_soon(drain)
    await trio.testing.wait_all_tasks_blocked()
    assert not drained.is_set() and pump.backlog() == 100  # in flight: the peer has not read
    received = b""
    while len(received) < 100:
        received += await theirs.receive_some()
    await drained.wait()
    assert received == b"x" * 100 and pump.backlog() == 0


async def test_a_reader_waits_for_room_until_the_backlog_falls_to_high_water(nursery: trio.Nursery) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()
    wire = FakeWire()
    pump = Pump(ours, wire, high_water=10)
    nursery.start_soon(pump.write_loop)
    wire.out.append(b"a" * 20)
    pump.wakeup.set()
    await trio.testing.wait_all_tasks_blocked()  # the writer holds 20 bytes the peer does not read
    room = trio.Event()

    async def reader() -> None:
        await pump.wait_for_room()
        room.set()

    nursery.start_soon(reader)
    await trio.testing.wait_all_tasks_blocked()
    assert not room.is_set()
    await theirs.receive_some()
    await room.wait()
    assert pump.backlog() <= 10


async def test_a_broken_stream_ends_the_writer_and_frees_its_waiters(nursery: trio.Nursery) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()
    wire = FakeWire()
    pump = Pump(ours, wire, high_water=10)
    ended: list[BaseException] = []

    async def writer() -> None:
        ended.append(await pump.write_loop())

    nursery.start_soon(writer)
    wire.out.append(b"b" * 20)
    pump.wakeup.set()
    await trio.testing.wait_all_tasks_blocked()
    await theirs.aclose()
    with trio.fail_after(1):
        await pump.drain()
        await pump.wait_for_room()
    assert isinstance(ended[0], trio.BrokenResourceError)
    assert pump.send_error is ended[0]


async def test_receive_feeds_the_wire_and_turns_a_broken_stream_into_eof() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    wire = FakeWire()
    pump = Pump(ours, wire)
    await theirs.send_all(b"hello")
    assert await pump.receive() == b"hello"
    await ours.aclose()
    assert await pump.receive() == b""
    assert wire.received == [b"hello", b""]
    assert isinstance(pump.receive_error, trio.ClosedResourceError)


async def test_keep_alive_sends_heartbeats_and_returns_after_two_silent_intervals(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    wire = FakeWire()
    pump = Pump(ours, wire)
    nursery.start_soon(pump.write_loop)
    started = trio.current_time()
    await pump.keep_alive(4)
    assert trio.current_time() - started == 8
    assert await theirs.receive_some() == HEARTBEAT * 3  # at 2, 4 and 6 s


async def test_keep_alive_does_not_count_a_paused_silence(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    ours, _ = trio.testing.memory_stream_pair()
    pump = Pump(ours, FakeWire())
    nursery.start_soon(pump.write_loop)
    paused = True
    started = trio.current_time()

    async def resume_later() -> None:
        nonlocal paused
        await trio.sleep(30)
        paused = False
        pump.last_received = trio.current_time()

    nursery.start_soon(resume_later)
    await pump.keep_alive(4, lambda: paused)
    assert trio.current_time() - started == 38
