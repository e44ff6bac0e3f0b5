"""The pump: moves one AMQP connection's bytes between a `trio.abc.Stream` and its sans-I/O wire.

Both ends of the project speak through it: the node's connection handler (gateway.server, over
a `ServerConnection`) and the federation client (federation.client, over a `ClientConnection`).
What the protocol means stays with them; the pump only knows the `Wire` interface below.

Theory of operation
-------------------
A connection's code runs three kinds of task over one pump, each in the owner's nursery:

- a reader that calls `receive` (bytes from the stream go straight into the wire) and then
  handles the wire's events;
- one writer, `write_loop`, the only task writing the stream: it sleeps on the `wakeup` event,
  which whoever queues output sets, and sends everything queued at once;
- when a heartbeat is negotiated, `keep_alive`.

Nothing here polls. Each wait is on an event set by the task that changes what is waited for:
the writer sets `drained` waiters free when the output buffer is empty (`drain`), and the reader
waiting for room (`wait_for_room`, a peer that does not read what we send) when the backlog
falls to `high_water`. Heartbeats are deadlines on Trio's clock (`trio.sleep_until`), so they
run under `trio.testing.MockClock` too.

Resource handling: `write_loop` returns, with the exception, when the stream breaks or is
closed; it then frees every waiter of `drain` and `wait_for_room`, so a broken stream never
leaves a task waiting for bytes that cannot be sent. The owner decides what the break means.

Error handling: `receive` turns a broken or closed stream into end of file (b""), keeping the
exception in `receive_error` for the owner's message; the pump raises nothing of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import trio

#: When more than this waits to be written, a reader that calls `wait_for_room` stops reading
#: (the node also stops dispatching to the connection: see gateway.server and docs/amqp.md,
#: "Back-pressure").
HIGH_WATER = 512 * 1024
RECEIVE_SIZE = 256 * 1024


class Wire(Protocol):
    """What the pump needs of a sans-I/O connection (gateway.wire's server and client both)."""

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; b"" at end of file."""
        ...

    def data_to_send(self) -> bytes:
        """Everything queued for the peer, taken out of the buffer."""
        ...

    def pending_output(self) -> int:
        """How many bytes are queued for the peer."""
        ...

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame."""
        ...


class Pump:
    """The byte mover of one connection: see the module's theory of operation.

    Args:
        stream: any byte stream (TCP, TLS, a WebSocket adapter, memory streams in tests).
        wire: the connection's sans-I/O state machine.
        high_water: the backlog over which `wait_for_room` waits.
        receive_size: the most one `receive` reads.

    `sending` is the size of the write in flight (0: none), `last_received` and `last_sent`
    are `trio.current_time()` of the last byte each way.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        wire: Wire,
        *,
        high_water: int = HIGH_WATER,
        receive_size: int = RECEIVE_SIZE,
    ) -> None:
        self.stream = stream
        self.wire = wire
        self.high_water = high_water
        self.receive_size = receive_size
        #: Set it after queuing output: the writer sends what is queued. A new Event once the
        #: writer has taken it, so always reach it through the pump.
        self.wakeup = trio.Event()
        self.sending = 0
        self.last_received = trio.current_time()
        self.last_sent = self.last_received
        #: Why `receive` saw end of file, when the stream broke rather than ended cleanly.
        self.receive_error: BaseException | None = None
        #: Why the writer stopped (the stream broke or was closed); None while it runs.
        self.send_error: BaseException | None = None
        self._drained: trio.Event | None = None
        self._room: trio.Event | None = None

    def backlog(self) -> int:
        """Bytes queued or being sent."""
        return self.wire.pending_output() + self.sending

    # -- reading --------------------------------------------------------------------------------

    async def receive(self) -> bytes:
        """Read what the peer sent and feed it to the wire; b"" at end of file (also fed)."""
        try:
            received = await self.stream.receive_some(self.receive_size)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.receive_error = exc
            received = b""
        # Sockets give bytes; a bytearray (memory streams) is copied once per read.
        data = received if type(received) is bytes else bytes(received)
        self.last_received = trio.current_time()
        self.wire.receive_data(data)
        return data

    async def wait_for_room(self) -> None:
        """Wait while more than `high_water` is queued or being sent: the peer is not reading
        what we send, so we stop reading what it sends. Returns at once if the writer stopped."""
        while self.send_error is None and self.wire.pending_output() + self.sending > self.high_water:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    # -- writing --------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wake the writer and wait until everything queued is sent (or the writer stopped).
        Callers bound it (trio.move_on_after): a peer that does not read never drains it."""
        while self.send_error is None and (self.wire.pending_output() or self.sending):
            if self._drained is None:
                self._drained = trio.Event()
            self.wakeup.set()
            await self._drained.wait()

    async def write_loop(self, after_send: Callable[[], None] | None = None) -> BaseException:
        """Send what the wire queues, each time `wakeup` is set, until the stream fails.

        `after_send`, if given, runs after each wakeup (the node resumes a paused connection
        there). Returns the exception that ended it (BrokenResourceError, ClosedResourceError).
        """
        wire = self.wire
        stream = self.stream
        while True:
            await self.wakeup.wait()
            self.wakeup = trio.Event()
            data = wire.data_to_send()
            if data:
                self.sending = len(data)
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self.send_error = exc
                    for waiters in (self._drained, self._room):
                        if waiters is not None:
                            waiters.set()
                    return exc
                finally:
                    self.sending = 0
                self.last_sent = trio.current_time()
            if after_send is not None:
                after_send()
            if self._room is not None and wire.pending_output() <= self.high_water:
                self._room.set()
                self._room = None
            if self._drained is not None and not wire.pending_output():
                self._drained.set()
                self._drained = None

    # -- heartbeats -----------------------------------------------------------------------------

    async def keep_alive(self, interval: float, paused: Callable[[], bool] = lambda: False) -> None:
        """Heartbeats for a negotiated `interval` (seconds): send one after interval/2 without
        sending anything, and return once the peer has sent nothing for two intervals (the
        caller then ends the connection). While `paused()` (we chose not to read: a blocked
        publisher, a full delivery buffer) the peer's silence is not its fault and does not
        count; whoever pauses resets `last_received` when reading again.
        """
        half, limit = interval / 2, 2 * interval
        queued = -math.inf  # when we last queued a heartbeat (the writer may still hold it)
        while True:
            now = trio.current_time()
            is_paused = paused()
            if not is_paused and now - self.last_received >= limit:
                return
            if now - max(self.last_sent, queued) >= half:
                self.wire.send_heartbeat()
                self.wakeup.set()
                queued = now
            send_at = max(self.last_sent, queued) + half
            await trio.sleep_until(send_at if is_paused else min(send_at, self.last_received + limit))
