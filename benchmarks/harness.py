"""Run every scenario against each broker, one broker at a time, and collect the figures.

Brokers run one after the other (never side by side) so each has the machine's two cores to
share only with the load tool, as in the baseline note.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from . import brokers
from .load import (
    ACK_EVERY,
    BODY_SIZE,
    CONFIRM_WINDOW,
    PREFETCH,
    Workload,
    consumer_main,
    publisher_main,
)
from .procstats import (
    cpu_seconds_between,
    cpu_ticks,
    peak_rss_mb,
    process_tree,
    reset_peak_rss,
)
from .scenarios import SCENARIOS, Scenario, declare, remove
from .wire import AMQPClosed, Connection

BROKERS = ("rabbitmq", "gateway")


@dataclass(frozen=True)
class Settings:
    messages: int
    repeat: int
    timeout: float  # seconds per run, setup included
    gateway_command: Path


def _start(name: str, workdir: Path, settings: Settings) -> AbstractContextManager[brokers.RunningBroker]:
    if name == "rabbitmq":
        return brokers.rabbitmq(workdir)
    return brokers.gateway(workdir, settings.gateway_command)


class ScenarioFailed(Exception):
    pass


def _receive(pipe: Pipe, deadline: float, who: str) -> Any:
    """Next message from a child, or ScenarioFailed on its error report or on the deadline."""
    if not pipe.poll(max(0.0, deadline - time.monotonic())):
        raise ScenarioFailed(f"timed out waiting for the {who}")
    try:
        message = pipe.recv()
    except EOFError:
        raise ScenarioFailed(f"the {who} died without reporting") from None
    if isinstance(message, tuple) and message[0] == "error":
        raise ScenarioFailed(f"{who}: {message[1]}")
    return message


def _end(process: BaseProcess) -> None:
    """Stop a child we started if it is still running (only after a failure or timeout)."""
    if process.is_alive():
        process.terminate()
        process.join(5)
        if process.is_alive():
            process.kill()
    process.join()


def run_once(broker: brokers.RunningBroker, s: Scenario, messages: int, timeout: float) -> dict[str, Any]:
    """One publisher/consumer run; the broker's CPU and peak RSS are read around it."""
    ctx = multiprocessing.get_context("fork")
    work = Workload(
        host=broker.host,
        port=broker.port,
        exchange=s.exchange,
        routing_key=s.routing_key,
        queue=s.queue,
        messages=messages,
        persistent=s.persistent,
        confirms=s.confirms,
        rate=s.rate,
        idle_timeout=timeout,
    )
    deadline = time.monotonic() + timeout
    setup = Connection.open(broker.host, broker.port, timeout=timeout)
    children: list[BaseProcess] = []
    try:
        declare(setup, s)
        consumer_pipe, child_end = ctx.Pipe()
        children.append(ctx.Process(target=consumer_main, args=(work, child_end), daemon=True))
        children[-1].start()
        _receive(consumer_pipe, deadline, "consumer")
        publisher_pipe, child_end = ctx.Pipe()
        children.append(ctx.Process(target=publisher_main, args=(work, child_end), daemon=True))
        children[-1].start()
        _receive(publisher_pipe, deadline, "publisher")
        tree = process_tree(broker.pid)
        before = cpu_ticks(tree)
        rss_reset = reset_peak_rss(tree)
        publisher_pipe.send("go")
        _, pub = _receive(publisher_pipe, deadline, "publisher")
        _, con = _receive(consumer_pipe, deadline, "consumer")
        tree = process_tree(broker.pid)
        cpu = cpu_seconds_between(before, cpu_ticks(tree))
        rss = peak_rss_mb(tree)
    finally:
        for child in children:
            _end(child)
        try:
            remove(setup, s)
        finally:
            setup.close()
    elapsed = (con["last_ns"] - pub["start_ns"]) / 1e9
    return {
        "msg_per_s": messages / elapsed,
        "p50_ms": con["p50_ms"],
        "p99_ms": con["p99_ms"],
        "max_ms": con["max_ms"],
        "broker_cpu_s": cpu,
        "broker_cpu_us_per_msg": cpu / messages * 1e6,
        "peak_rss_mb": rss,
        "peak_rss_is_per_run": rss_reset,
        "elapsed_s": elapsed,
        "publish_s": (pub["sent_ns"] - pub["start_ns"]) / 1e9,
        "confirmed_s": (pub["done_ns"] - pub["start_ns"]) / 1e9,
        "publisher_cpu_s": pub["cpu_s"],
        "consumer_cpu_s": con["cpu_s"],
    }


def run_scenario(broker: brokers.RunningBroker, s: Scenario, settings: Settings) -> dict[str, Any]:
    """Repeat a throughput scenario and keep the run with the median rate (paced: one run)."""
    runs: list[dict[str, Any]] = []
    for _ in range(1 if s.rate else settings.repeat):
        try:
            runs.append(run_once(broker, s, settings.messages, settings.timeout))
        except Exception as exc:  # a failed scenario is reported, the others still run
            error = f"{type(exc).__name__}: {exc}"
            print(f"  {s.key}: FAILED: {error}", flush=True)
            return {"title": s.title, "ok": False, "error": error, "runs": runs}
        print(
            f"  {s.key}: {runs[-1]['msg_per_s']:,.0f} msg/s, p50 {runs[-1]['p50_ms']:.2f} ms,"
            f" p99 {runs[-1]['p99_ms']:.2f} ms",
            flush=True,
        )
    median_rate = statistics.median_low(r["msg_per_s"] for r in runs)
    chosen = next(r for r in runs if r["msg_per_s"] == median_rate)
    return {"title": s.title, "ok": True, **chosen, "runs": runs}


def run_broker(name: str, settings: Settings) -> dict[str, Any]:
    print(f"{name}: starting", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"amq-bench-{name}-") as tmp:
        try:
            with _start(name, Path(tmp), settings) as broker:
                probe = Connection.open(broker.host, broker.port)
                server = {
                    k: str(v)
                    for k, v in probe.server_properties.items()
                    if k in ("product", "version", "platform")
                }
                probe.close()
                scenarios = {s.key: run_scenario(broker, s, settings) for s in SCENARIOS}
        except (brokers.BrokerUnavailable, AMQPClosed, OSError) as exc:
            print(f"{name}: not measured: {exc}", flush=True)
            return {"status": "unavailable", "note": f"{type(exc).__name__}: {exc}"}
    return {"status": "ran", "server": server, "scenarios": scenarios}


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def run(only: str | None, settings: Settings, command: str) -> dict[str, Any]:
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(),
        "settings": {
            **asdict(settings),
            "gateway_command": str(settings.gateway_command),
            "body_bytes": BODY_SIZE,
            "prefetch": PREFETCH,
            "ack_every": ACK_EVERY,
            "confirm_window": CONFIRM_WINDOW,
        },
        "brokers": {},
    }
    for name in BROKERS:
        if only and name != only:
            results["brokers"][name] = {"status": "skipped", "note": f"--only {only}"}
        else:
            results["brokers"][name] = run_broker(name, settings)
    results["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    return results
