"""The load tool: one publisher process and one consumer process on raw sockets.

A Python client that builds and parses frames per message measures itself (pika tops out near
25k msg/s here). So the publisher encodes its whole stream before the clock starts (each body
carries a sequence number) and only patches each batch's send time in with eight strided slice
assignments, and the consumer, after parsing the first delivery to learn its fixed layout,
checks whole runs of deliveries with strided byte slices and pulls the times and sequence
numbers out with one struct.iter_unpack: no Python object per frame on either side. The sequence
numbers let every run prove that no message was lost or delivered twice.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from typing import Any

from pamqp import commands

from .wire import (
    METHOD_IDS,
    STAMP,
    AMQPClosed,
    Connection,
    ack_frame,
    close_reason,
    publish_template,
    split_frame,
)

BODY_SIZE = 100
PREFETCH = 1000
ACK_EVERY = 500
CONFIRM_WINDOW = 1000
BATCH = 1000
RECV_SIZE = 1 << 20
# No delivery for this long: what has not arrived is not coming, and is reported as lost.
STALL_S = 10.0
# How long the consumer keeps listening after the last expected message, to catch duplicates.
LINGER_S = 0.2
_TAG = struct.Struct(">Q")
CLOSE_METHODS = ((10, 50), (20, 40))  # Connection.Close, Channel.Close


@dataclass(frozen=True)
class Workload:
    """What one publisher/consumer pair does; picklable so it crosses the process boundary."""

    host: str
    port: int
    exchange: str
    routing_key: str
    queue: str
    messages: int
    persistent: bool = False
    confirms: bool = False
    rate: int | None = None  # messages per second; None = as fast as the broker takes them
    idle_timeout: float = 30.0
    #: Over TLS, checking the broker against this CA file (None: plain TCP).
    tls_ca: str | None = None


def _guard(pipe: Pipe, work: Any, *args: Any) -> None:
    """Run a process body and always report back, so the parent never waits on a silent child.

    The pipe carries "ready" (and for the publisher, "go" back), then ("ok", result) or
    ("error", text).
    """
    try:
        pipe.send(("ok", work(*args)))
    except Exception as exc:  # reported to the parent, which marks the scenario failed
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        pipe.close()


# ---------------------------------------------------------------- publisher


class _Confirms:
    """Counts confirmed publishes from Basic.Ack frames, single or multiple, in any order."""

    def __init__(self) -> None:
        self.upto = 0  # every tag <= upto is confirmed
        self.above: set[int] = set()  # singly confirmed tags > upto

    @property
    def count(self) -> int:
        return self.upto + len(self.above)

    def ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag > self.upto:
                self.upto = tag
                self.above = {t for t in self.above if t > tag}
        elif tag == self.upto + 1:
            self.upto = tag
            while self.upto + 1 in self.above:
                self.upto += 1
                self.above.discard(self.upto)
        elif tag > self.upto:
            self.above.add(tag)

    def feed(self, buf: bytearray) -> None:
        """Consume every complete frame in buf; a nack or close fails the run."""
        pos = 0
        while (found := split_frame(buf, pos)) is not None:
            ftype, _, end = found
            if ftype == 1:
                ids = METHOD_IDS.unpack_from(buf, pos + 7)
                if ids == (60, 80):
                    self.ack(_TAG.unpack_from(buf, pos + 11)[0], bool(buf[pos + 19] & 1))
                elif ids == (60, 120):
                    raise AMQPClosed(f"broker nacked tag {_TAG.unpack_from(buf, pos + 11)[0]}")
                elif ids in CLOSE_METHODS:
                    raise AMQPClosed(close_reason(buf, pos))
            pos = end
        del buf[:pos]


class _Stream:
    """Every message of the run, encoded once, numbered 0..n-1; send times are patched in."""

    def __init__(self, work: Workload) -> None:
        prefix, suffix = publish_template(work.exchange, work.routing_key, work.persistent, BODY_SIZE)
        self.size = len(prefix) + STAMP.size + len(suffix)
        self._time_at = len(prefix)
        self._bytes = bytearray(
            b"".join(prefix + STAMP.pack(0, seq) + suffix for seq in range(work.messages))
        )
        self._view = memoryview(self._bytes)

    def batch(self, first: int, k: int, now: int) -> memoryview:
        """Messages first..first+k-1, stamped with send time now."""
        start, end = first * self.size, (first + k) * self.size
        for i, byte in enumerate(now.to_bytes(8, "big")):
            self._bytes[start + self._time_at + i : end : self.size] = bytes((byte,)) * k
        return self._view[start:end]


def _publish(work: Workload, go: Pipe) -> dict[str, float]:
    conn = Connection.open(work.host, work.port, timeout=work.idle_timeout, tls_ca=work.tls_ca)
    if work.confirms:
        conn.call(commands.Confirm.Select())
    stream = _Stream(work)
    sock, clock = conn.sock, time.perf_counter_ns
    go.send("ready")
    go.recv()  # the parent has taken its "before" readings of the broker
    confirms = _Confirms()
    sent = 0
    start = clock()
    while sent < work.messages:
        if work.rate:
            due = min(work.messages, (clock() - start) * work.rate // 1_000_000_000 + 1)
            if due <= sent:
                time.sleep(max(0, start + sent * 1_000_000_000 // work.rate - clock()) / 1e9)
                continue
            k = due - sent
        elif work.confirms:
            room = CONFIRM_WINDOW - (sent - confirms.count)
            if room < CONFIRM_WINDOW // 4:
                _recv_into(sock, conn.buf)
                confirms.feed(conn.buf)
                continue
            k = min(room, work.messages - sent)
        else:
            k = min(BATCH, work.messages - sent)
        sock.sendall(stream.batch(sent, k, clock()))
        sent += k
    sent_ns = clock()
    while work.confirms and confirms.count < work.messages:
        _recv_into(sock, conn.buf)
        confirms.feed(conn.buf)
    done_ns = clock()
    # A round trip that fails with the broker's reason if it closed the channel on us, which
    # an unconfirmed publisher would otherwise never notice.
    conn.call(commands.Channel.Close(reply_code=200, reply_text="done", class_id=0, method_id=0))
    conn.close()
    return {
        "start_ns": start,
        "sent_ns": sent_ns,
        "done_ns": done_ns,
        "published": sent,
        "cpu_s": time.process_time(),
    }


def _recv_into(sock: Any, buf: bytearray) -> None:
    chunk = sock.recv(RECV_SIZE)
    if not chunk:
        raise AMQPClosed("connection closed by the broker")
    buf += chunk


def publisher_main(work: Workload, pipe: Pipe) -> None:
    """Process entry point: handshake, say ready, wait for go, publish, report timings."""
    _guard(pipe, _publish, work, pipe)


# ---------------------------------------------------------------- consumer


@dataclass(frozen=True)
class _Layout:
    """Where things sit in one delivery (Basic.Deliver + header + one body frame)."""

    size: int
    tag_at: int
    header_at: int
    body_at: int

    def stamps(self) -> struct.Struct:
        """Unpacks (send time, sequence number) from one delivery."""
        at = self.body_at + 7
        return struct.Struct(f">{at}xQQ{self.size - at - STAMP.size}x")


def _parse_one(buf: bytearray, pos: int) -> tuple[int, _Layout | None] | None:
    """Parse the unit at pos generically: a whole delivery, or one other frame.

    Returns (end offset, layout if it was a delivery) or None if more bytes are needed.
    """
    found = split_frame(buf, pos)
    if found is None:
        return None
    ftype, _, end = found
    if ftype != 1:
        return end, None
    ids = METHOD_IDS.unpack_from(buf, pos + 7)
    if ids in CLOSE_METHODS:
        raise AMQPClosed(close_reason(buf, pos))
    if ids == (60, 30):
        raise AMQPClosed("the broker cancelled the consumer")
    if ids != (60, 60):
        return end, None
    head = split_frame(buf, end)
    if head is None:
        return None
    body = split_frame(buf, head[2])
    if body is None:
        return None
    if body[2] - head[2] - 8 != _TAG.unpack_from(buf, end + 11)[0]:
        raise AMQPClosed("a body not in exactly one frame; the load tool expects one")
    return body[2], _Layout(body[2] - pos, 12 + buf[pos + 11], end - pos, head[2] - pos)


class _Deliveries:
    """Counts deliveries, collects latencies and sequence numbers, touching as few bytes per
    message as it can."""

    def __init__(self) -> None:
        self.count = 0
        self.acked = 0
        self.last_tag = 0
        self.latencies: list[int] = []
        self.seqs: list[int] = []
        self.layout: _Layout | None = None
        self._unpack: struct.Struct | None = None

    def feed(self, buf: bytearray, now: int) -> None:
        """Consume every complete unit in buf; now is when these bytes arrived."""
        pos = 0
        while True:
            pos = self._fast(buf, pos, now)
            parsed = _parse_one(buf, pos)
            if parsed is None:
                break
            end, layout = parsed
            if layout is not None:
                if self.layout != layout:
                    self.layout, self._unpack = layout, layout.stamps()
                self._take(buf, pos, 1, now)
            pos = end
        del buf[:pos]

    def _fast(self, buf: bytearray, pos: int, now: int) -> int:
        """Take the longest run of whole deliveries with the known layout, checked by stride."""
        lay = self.layout
        if lay is None:
            return pos
        k = (len(buf) - pos) // lay.size
        while k:
            end = pos + k * lay.size
            if (
                buf[pos : end : lay.size] == b"\x01" * k
                and buf[pos + 10 : end : lay.size] == b"\x3c" * k
                and buf[pos + lay.header_at : end : lay.size] == b"\x02" * k
                and buf[pos + lay.body_at : end : lay.size] == b"\x03" * k
                and buf[pos + lay.size - 1 : end : lay.size] == b"\xce" * k
            ):
                self._take(buf, pos, k, now)
                return end
            k //= 2  # something else is in the run (or a layout change): try a shorter run
        return pos

    def _take(self, buf: bytearray, pos: int, k: int, now: int) -> None:
        assert self.layout is not None and self._unpack is not None
        end = pos + k * self.layout.size
        stamps = list(self._unpack.iter_unpack(buf[pos:end]))
        self.latencies.extend([now - t for t, _ in stamps])
        self.seqs.extend([seq for _, seq in stamps])
        self.count += k
        self.last_tag = _TAG.unpack_from(buf, end - self.layout.size + self.layout.tag_at)[0]


def _consume(work: Workload, ready: Pipe) -> dict[str, Any]:
    conn = Connection.open(work.host, work.port, timeout=work.idle_timeout, tls_ca=work.tls_ca)
    conn.call(commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.call(commands.Basic.Consume(queue=work.queue, consumer_tag="bench"))
    deliveries = _Deliveries()
    stall = min(STALL_S, work.idle_timeout)
    ready.send("ready")
    conn.sock.settimeout(stall)
    last_ns = _collect(conn, deliveries, work.messages)
    conn.sock.settimeout(LINGER_S)
    _collect(conn, deliveries, None)
    conn.close()
    if not deliveries.count:
        raise AMQPClosed(f"no message arrived within {stall:.0f} s")
    expected = {seq for seq in set(deliveries.seqs) if seq < work.messages}
    return {
        "consumed": deliveries.count,
        "lost": work.messages - len(expected),
        "duplicated": deliveries.count - len(expected),  # or foreign to this run
        "last_ns": last_ns,
        "cpu_s": time.process_time(),
        **_percentiles(deliveries.latencies),
    }


def _collect(conn: Connection, deliveries: _Deliveries, until: int | None) -> int:
    """Take deliveries until `until` have arrived or the socket times out; acks as it goes.

    Returns when the last bytes arrived (perf_counter_ns).
    """
    sock, buf, clock = conn.sock, conn.buf, time.perf_counter_ns
    last_ns = clock()
    while until is None or deliveries.count < until:
        try:
            chunk = sock.recv(RECV_SIZE)
        except TimeoutError:
            break
        last_ns = clock()
        if not chunk:
            raise AMQPClosed("connection closed by the broker")
        buf += chunk
        deliveries.feed(buf, last_ns)
        unacked = deliveries.count - deliveries.acked
        if unacked >= ACK_EVERY or (unacked and until is not None and deliveries.count >= until):
            sock.sendall(ack_frame(deliveries.last_tag, multiple=True))
            deliveries.acked = deliveries.count
    return last_ns


def _percentiles(latencies: list[int]) -> dict[str, float]:
    """Nearest-rank p50/p99/max in milliseconds."""
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": ordered[-1] / 1e6}


def consumer_main(work: Workload, pipe: Pipe) -> None:
    """Process entry point: qos, consume, say ready, count every message, report latencies."""
    _guard(pipe, _consume, work, pipe)
