"""Memory while a backlog piles up with no consumer, then its drain (issue 14).

Per broker, started fresh, and per message size (100-byte and 1 MB bodies):

- pile up: one publisher with confirms (CONFIRM_WINDOW in flight) publishes persistent messages
  to a durable queue nobody consumes, until every one is confirmed or the phase's time limit
  passes: a broker that holds its publishers at its memory watermark and cannot page messages
  out stops confirming, and the publisher then stops. Reported: messages confirmed, their rate,
  whether the broker sent Connection.Blocked, and the peak RSS of the broker's process tree
  (VmHWM, reset at the phase's start);
- drain: a consumer (prefetch 1000, one multiple ack every 500) takes every confirmed message;
  reported: its rate, and the peak RSS while it ran.

Both brokers run with their default memory watermark (0.4 of this machine's memory).
"""

from __future__ import annotations

import json
import multiprocessing
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pamqp import body, commands, frame, header

from simulations.procstats import peak_rss_mb, process_tree, reset_peak_rss

from . import brokers, sections
from .backlog import _deliveries
from .load import CONFIRM_WINDOW, PREFETCH, _Confirms, _guard, _recv_into
from .wire import METHOD_IDS, STAMP, Connection, split_frame

QUEUE = "bench.memory"
BROKERS = ("rabbitmq", "gateway")
#: (key, body bytes, default message count): the issue's 5 M small and 20 k large messages.
SIZES = (("small", 100, 5_000_000), ("large", 1 << 20, 20_000))
#: The largest body frame payload at the frame_max both brokers offer (131072).
BODY_FRAME = 131072 - 8
MARK_BEGIN, MARK_END = sections.MARKERS["memory"]
NAMES = {"rabbitmq": "RabbitMQ", "gateway": "amq-gateway"}


def template(size: int) -> tuple[bytes, bytes]:
    """(prefix, suffix) of one persistent message to QUEUE with a `size`-byte body: prefix +
    STAMP + suffix, the body split into frames as a client splits it."""
    props = commands.Basic.Properties(delivery_mode=2)
    frames = [
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=QUEUE), 1),
        frame.marshal(header.ContentHeader(0, size, props), 1),
    ]
    frames += [
        frame.marshal(body.ContentBody(bytes(min(BODY_FRAME, size - at))), 1)
        for at in range(0, size, BODY_FRAME)
    ]
    head = b"".join(frames[:3])
    stamp_at = len(frames[0]) + len(frames[1]) + 7
    return head[:stamp_at], head[stamp_at + STAMP.size :] + b"".join(frames[3:])


def _blocked_in(buf: bytearray) -> bool:
    """Whether the frames in buf (already read) hold a Connection.Blocked."""
    pos = 0
    while (found := split_frame(buf, pos)) is not None:
        ftype, _, end = found
        if ftype == 1 and METHOD_IDS.unpack_from(buf, pos + 7) == (10, 60):
            return True
        pos = end
    return False


def _pile_up(address: tuple[str, int], size: int, count: int, seconds: float) -> dict[str, Any]:
    """Publish until `count` are confirmed or `seconds` pass; confirmed count and timings."""
    conn = Connection.open(*address, timeout=30)
    conn.call(commands.Confirm.Select())
    prefix, suffix = template(size)
    confirms = _Confirms()
    sock = conn.sock
    sock.settimeout(1.0)
    blocked = False
    sent = 0
    start = time.perf_counter()
    deadline = start + seconds
    held = False
    while confirms.count < count and time.perf_counter() < deadline:
        room = min(CONFIRM_WINDOW - (sent - confirms.count), count - sent)
        try:
            if room > 0:
                chunk = min(room, max(1, (1 << 20) // (size + 64)))
                sock.sendall(b"".join(prefix + STAMP.pack(0, sent + i) + suffix for i in range(chunk)))
                sent += chunk
                continue
            _recv_into(sock, conn.buf)
        except TimeoutError:
            held = True  # the broker reads or confirms nothing: wait until the deadline
            continue
        blocked = blocked or _blocked_in(conn.buf)
        confirms.feed(conn.buf)
    elapsed = time.perf_counter() - start
    sock.close()  # a half-sent message, if the deadline cut one, dies with the connection
    return {
        "confirmed": confirms.count,
        "publish_s": round(elapsed, 2),
        "msg_per_s": confirms.count / elapsed,
        "blocked": blocked,
        "stalled": held,
    }


def _drain(address: tuple[str, int], count: int) -> dict[str, Any]:
    conn = Connection.open(*address, timeout=600)
    start = time.perf_counter()
    conn.call(commands.Basic.Qos(prefetch_count=PREFETCH))
    conn.call(commands.Basic.Consume(queue=QUEUE, consumer_tag="drain"))
    _deliveries(conn, count, ack=True)
    elapsed = time.perf_counter() - start
    conn.close()
    return {"drained": count, "drain_s": round(elapsed, 2), "drain_msg_per_s": count / elapsed}


def _run_child(work: Any, *args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    child = context.Process(target=_guard, args=(theirs, work, *args))
    child.start()
    try:
        status, result = ours.recv()
        if status != "ok":
            raise RuntimeError(str(result))
        return dict(result)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


def _measured(pids: list[int], work: Any, *args: Any) -> tuple[dict[str, Any], float]:
    reset_peak_rss(pids)
    result = _run_child(work, *args)
    return result, peak_rss_mb(pids)


def run_broker(name: str, gateway_command: Path, counts: dict[str, int], seconds: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, size, _ in SIZES:
        count = counts[key]
        print(f"memory: {name}: {count:,} messages of {size:,} bytes", flush=True)
        with tempfile.TemporaryDirectory(prefix=f"amq-bench-memory-{name}-") as tmp:
            start = (
                brokers.rabbitmq(Path(tmp))
                if name == "rabbitmq"
                else brokers.gateway(Path(tmp), gateway_command)
            )
            try:
                with start as broker:
                    address = (broker.host, broker.port)
                    setup = Connection.open(*address)
                    setup.call(commands.Queue.Declare(queue=QUEUE, durable=True))
                    setup.close()
                    pids = process_tree(broker.pid)
                    idle = peak_rss_mb(pids) if reset_peak_rss(pids) else 0.0
                    pile, pile_rss = _measured(pids, _pile_up, address, size, count, seconds)
                    drain, drain_rss = _measured(pids, _drain, address, pile["confirmed"])
                    results[key] = {
                        "size": size,
                        "messages": count,
                        "idle_rss_mb": idle,
                        **pile,
                        "pile_peak_rss_mb": pile_rss,
                        **drain,
                        "drain_peak_rss_mb": drain_rss,
                    }
                    print(f"memory: {name}: {key}: {results[key]}", flush=True)
            except (brokers.BrokerUnavailable, OSError, RuntimeError) as exc:
                print(f"memory: {name}: {key}: not measured: {exc}", flush=True)
                results[key] = {"size": size, "messages": count, "error": f"{type(exc).__name__}: {exc}"}
    return results


def run(
    gateway_command: Path, counts: dict[str, int], seconds: float, command: str, only: str | None = None
) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "phase_limit_s": seconds,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "brokers": {
            name: run_broker(name, gateway_command, counts, seconds) if only in (None, name) else {}
            for name in BROKERS
        },
    }


def render(results: dict[str, Any]) -> str:
    lines = [
        MARK_BEGIN,
        "## Memory while a backlog piles up, and its drain",
        "",
        f"Measured {results['date']} (load average at start {' '.join(results['loadavg_at_start'])}) with:",
        "",
        f"    {results['command']}",
        "",
        "Per message size, each broker started fresh with its default memory watermark: one publisher"
        f" with confirms ({CONFIRM_WINDOW} in flight) publishes persistent messages to a durable queue"
        f" nobody consumes, until all are confirmed or {results['phase_limit_s']:.0f} s pass; then a"
        f" consumer (prefetch {PREFETCH}, multiple ack every 500) drains what was confirmed"
        " (`benchmarks/memory.py`). RSS is the peak over the broker's process tree in each phase.",
        "",
        "| messages | broker | confirmed | publish msg/s | blocked | peak RSS MiB | drain msg/s | drain peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    entries = results["brokers"]
    for key, size, _ in SIZES:
        for name in BROKERS:
            r = entries.get(name, {}).get(key)
            if r is None:
                continue
            title = f"{r['messages']:,} × {size:,} B"
            if "error" in r:
                lines.append(f"| {title} | {NAMES[name]} | not measured: {r['error'][:80]} | | | | | |")
                continue
            blocked = "yes" if r["blocked"] else "no"
            if r["stalled"]:
                blocked += ", stalled"
            lines.append(
                f"| {title} | {NAMES[name]} | {r['confirmed']:,} | {r['msg_per_s']:,.0f} | {blocked} |"
                f" {r['pile_peak_rss_mb']:,.0f} | {r['drain_msg_per_s']:,.0f} | {r['drain_peak_rss_mb']:,.0f} |"
            )
    lines += [
        "",
        f"With 1 MB messages the publisher's {CONFIRM_WINDOW:,} unconfirmed messages are about 1 GB in"
        " flight, which a broker holds until it has written them: most of both peaks. Stalled: the"
        " broker read or confirmed nothing for the client's socket timeout at least once (a long write).",
        "",
        "Targets (issue 14): peak RSS at or under RabbitMQ's, drain rate at or above it.",
        MARK_END,
    ]
    return "\n".join(lines) + "\n"


def write_markdown(results: dict[str, Any], path: Path) -> None:
    """Put the section into the report, replacing an earlier one and keeping the rest."""
    sections.put(path, "memory", render(results))


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
