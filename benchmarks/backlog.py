"""Confirm latency while a backlog is requeued and drained (issue 11, point 3).

Per broker, started fresh: fill a durable queue with N persistent messages (confirmed), then
two phases, each with a probe publisher in its own process that publishes one persistent
message at a time to another durable queue with confirms and times each confirm:

- requeue: a consumer without prefetch limit takes all N without acking (every delivery is
  recorded as delivered on disk), then closes its channel, which requeues all N;
- drain: a consumer (prefetch 1000, multiple ack every 500) takes and acks all N.

The probe runs from the phase's start until LINGER_S after its client is done (a broker may
still be writing what the client did), so its max and p99 say how long a publisher anywhere on
the node waits for a confirm while the broker stores the backlog's deliveries, requeues and acks.
"""

from __future__ import annotations

import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

from pamqp import commands

from . import brokers, sections
from .load import ACK_EVERY, BODY_SIZE, CONFIRM_WINDOW, PREFETCH, _Confirms, _guard, _recv_into
from .wire import METHOD_IDS, STAMP, Connection, ack_frame, publish_template, split_frame

BACKLOG = "bench.backlog"
PROBE = "bench.probe"
PROBE_INTERVAL_S = 0.002
LINGER_S = 10.0
PHASES = ("requeue", "drain")
BROKERS = ("rabbitmq", "gateway")
MARK_BEGIN, MARK_END = sections.MARKERS["backlog"]


def _open(address: tuple[str, int]) -> Connection:
    """A connection whose reads wait as long as a stalled broker may take."""
    return Connection.open(*address, timeout=600)


def _publish_all(conn: Connection, queue: str, first: int, count: int) -> None:
    """Publish `count` persistent messages with confirms, at most CONFIRM_WINDOW in flight."""
    prefix, suffix = publish_template("", queue, True, BODY_SIZE)
    confirms = _Confirms()
    start = confirms.count
    sent = 0
    while confirms.count - start < count:
        room = min(CONFIRM_WINDOW - (sent - (confirms.count - start)), count - sent)
        if room > 0:
            conn.sock.sendall(
                b"".join(prefix + STAMP.pack(0, first + i) + suffix for i in range(sent, sent + room))
            )
            sent += room
        _recv_into(conn.sock, conn.buf)
        confirms.feed(conn.buf)


def fill(address: tuple[str, int], count: int) -> None:
    conn = _open(address)
    try:
        conn.call(commands.Confirm.Select())
        _publish_all(conn, BACKLOG, 0, count)
    finally:
        conn.close()


def _probe(address: tuple[str, int], pipe: Pipe) -> list[tuple[int, int]]:
    """Publish one message at a time until told to stop; (send time, confirm latency) in ns."""
    conn = _open(address)
    conn.call(commands.Confirm.Select())
    prefix, suffix = publish_template("", PROBE, True, BODY_SIZE)
    confirms = _Confirms()
    latencies: list[tuple[int, int]] = []
    pipe.send("ready")
    while not pipe.poll():
        sent = time.perf_counter_ns()
        conn.sock.sendall(prefix + STAMP.pack(sent, len(latencies)) + suffix)
        while confirms.count <= len(latencies):
            _recv_into(conn.sock, conn.buf)
            confirms.feed(conn.buf)
        latencies.append((sent, time.perf_counter_ns() - sent))
        time.sleep(PROBE_INTERVAL_S)
    pipe.recv()
    conn.close()
    return latencies


def _deliveries(conn: Connection, count: int, ack: bool) -> None:
    """Read `count` deliveries; with `ack`, ack every ACK_EVERY with one multiple ack."""
    seen = 0
    last_acked = 0
    while seen < count:
        _recv_into(conn.sock, conn.buf)
        buf = conn.buf
        pos = 0
        while (found := split_frame(buf, pos)) is not None:
            ftype, _, end = found
            if ftype == 1 and METHOD_IDS.unpack_from(buf, pos + 7) == (60, 60):
                seen += 1
            pos = end
        del buf[:pos]
        if ack and (seen - last_acked >= ACK_EVERY or seen == count):
            conn.sock.sendall(ack_frame(seen, True))  # tags run 1..count on this channel
            last_acked = seen


def _requeue(address: tuple[str, int], count: int) -> float:
    """Take every message unacked, then close the channel: all of them go back."""
    conn = _open(address)
    started = time.monotonic()
    conn.call(commands.Basic.Qos(prefetch_count=0))
    conn.call(commands.Basic.Consume(queue=BACKLOG, consumer_tag="requeue"))
    _deliveries(conn, count, ack=False)
    conn.send(commands.Channel.Close(reply_code=200, reply_text="requeue", class_id=0, method_id=0))
    while True:
        _recv_into(conn.sock, conn.buf)
        pos = 0
        done = False
        while (found := split_frame(conn.buf, pos)) is not None:
            ftype, _, end = found
            done = done or (ftype == 1 and METHOD_IDS.unpack_from(conn.buf, pos + 7) == (20, 41))
            pos = end
        del conn.buf[:pos]
        if done:
            break
    conn.sock.close()
    return time.monotonic() - started


def _drain(address: tuple[str, int], count: int) -> float:
    conn = _open(address)
    started = time.monotonic()
    conn.call(commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.call(commands.Basic.Consume(queue=BACKLOG, consumer_tag="drain"))
    _deliveries(conn, count, ack=True)
    conn.close()
    return time.monotonic() - started


def _summary(probes: list[tuple[int, int]], started: int, seconds: float) -> dict[str, Any]:
    ordered = sorted(latency for _, latency in probes)
    slowest_at = max(probes, key=lambda probe: probe[1])[0]

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6

    return {
        "ok": True,
        "probes": len(ordered),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "max_ms": ordered[-1] / 1e6,
        "slowest_sent_at_s": round((slowest_at - started) / 1e9, 3),
        "phase_s": round(seconds, 2),
    }


def phase(
    address: tuple[str, int], client: Callable[[tuple[str, int], int], float], count: int
) -> dict[str, Any]:
    """Run `client` while the probe publishes; the probe's latency figures."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    probe = context.Process(target=_guard, args=(theirs, _probe, address, theirs))
    probe.start()
    try:
        if ours.recv() != "ready":
            raise RuntimeError("probe failed to start")
        started = time.perf_counter_ns()
        seconds = client(address, count)
        time.sleep(LINGER_S)
        ours.send("stop")
        status, result = ours.recv()
        if status != "ok":
            raise RuntimeError(f"probe: {result}")
        return _summary(result, started, seconds)
    finally:
        probe.join(30)
        if probe.is_alive():
            probe.kill()


def run_broker(name: str, count: int, gateway_command: Path) -> dict[str, Any]:
    print(f"backlog: {name}: starting", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"amq-bench-backlog-{name}-") as tmp:
        start = (
            brokers.rabbitmq(Path(tmp)) if name == "rabbitmq" else brokers.gateway(Path(tmp), gateway_command)
        )
        try:
            with start as broker:
                address = (broker.host, broker.port)
                setup = _open(address)
                setup.call(commands.Queue.Declare(queue=BACKLOG, durable=True))
                setup.call(commands.Queue.Declare(queue=PROBE, durable=True))
                setup.close()
                began = time.monotonic()
                fill(address, count)
                print(f"backlog: {name}: filled {count:,} in {time.monotonic() - began:.1f} s", flush=True)
                results = {}
                for key, client in (("requeue", _requeue), ("drain", _drain)):
                    results[key] = phase(address, client, count)
                    print(f"backlog: {name}: {key}: {results[key]}", flush=True)
                return {"status": "ran", "server": brokers.server_properties(broker), "phases": results}
        except (brokers.BrokerUnavailable, OSError, RuntimeError) as exc:
            print(f"backlog: {name}: not measured: {exc}", flush=True)
            return {"status": "unavailable", "note": f"{type(exc).__name__}: {exc}"}


def run(count: int, gateway_command: Path, command: str, only: str | None = None) -> dict[str, Any]:
    skipped = {"status": "skipped", "note": f"--only {only}"}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "messages": count,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "brokers": {
            name: run_broker(name, count, gateway_command) if only in (None, name) else skipped
            for name in BROKERS
        },
    }


NAMES = {"rabbitmq": "RabbitMQ", "gateway": "amq-gateway"}
TITLES = {
    "requeue": "consumer takes {n} unacked, then closes its channel (requeue)",
    "drain": "consumer drains {n} (prefetch 1000, ack every 500)",
}
#: Issue 11's target: our max confirm latency within this factor of RabbitMQ's.
TARGET = 2.0


def render(results: dict[str, Any]) -> str:
    n = f"{results['messages']:,}"
    lines = [
        MARK_BEGIN,
        "## Confirm latency while a backlog is requeued and drained",
        "",
        f"Measured {results['date']} (load average at start {' '.join(results['loadavg_at_start'])}) with:",
        "",
        f"    {results['command']}",
        "",
        f"A durable queue is filled with {n} persistent messages of {BODY_SIZE} bytes; then, in each"
        " phase, a probe publisher (its own process and connection) publishes one persistent"
        f" message at a time to another durable queue with confirms, every {PROBE_INTERVAL_S * 1000:.0f} ms,"
        f" and times each confirm, while another client works on the backlog (`benchmarks/backlog.py`)."
        f" The probe goes on {LINGER_S:.0f} s after the client is done; phase s is the client's time.",
        "",
        "| phase | broker | confirms timed | p50 ms | p99 ms | max ms | phase s | max gateway / RabbitMQ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    entries = results["brokers"]
    for key in PHASES:
        figures = {name: entries[name].get("phases", {}).get(key) for name in entries}
        for name in BROKERS:
            r = figures[name]
            if r is None:
                lines.append(
                    f"| {TITLES[key].format(n=n)} | {NAMES[name]} | not measured: {entries[name].get('note', '')[:80]} | | | | | |"
                )
                continue
            ratio = ""
            if name == "gateway" and figures["rabbitmq"] is not None:
                ratio = f"{r['max_ms'] / figures['rabbitmq']['max_ms']:.2f}"
            lines.append(
                f"| {TITLES[key].format(n=n)} | {NAMES[name]} | {r['probes']:,} | {r['p50_ms']:.2f} |"
                f" {r['p99_ms']:.2f} | {r['max_ms']:.2f} | {r['phase_s']:.1f} | {ratio} |"
            )
    lines += ["", f"Target (issue 11): max gateway / RabbitMQ ≤ {TARGET:g}.", MARK_END]
    return "\n".join(lines) + "\n"


def write_markdown(results: dict[str, Any], path: Path) -> None:
    """Put the section into the report, replacing an earlier one and keeping the rest."""
    sections.put(path, "backlog", render(results))


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
