"""Run every scenario against each broker, one broker at a time, and collect the figures.

Brokers run one after the other (never side by side) so each has the machine's two cores to
share only with the load tool, as in the baseline note.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from contextlib import AbstractContextManager
from dataclasses import asdict
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from . import brokers, fanout, federation
from .load import ACK_EVERY, BODY_SIZE, CONFIRM_WINDOW, PREFETCH, Workload
from .runs import Settings, measure, repeat
from .scenarios import SCENARIOS, Scenario, declare, remove
from .wire import AMQPClosed, Connection

BROKERS = ("rabbitmq", "gateway")
# What --only selects: one broker's single-node scenarios, the federation ones on both, or
# the fanout federation ones on ours.
ONLY = (*BROKERS, "federation", "fanout")


def _start(name: str, workdir: Path, settings: Settings) -> AbstractContextManager[brokers.RunningBroker]:
    if name == "rabbitmq":
        return brokers.rabbitmq(workdir)
    return brokers.gateway(workdir, settings.gateway_command)


def run_once(
    broker: brokers.RunningBroker, s: Scenario, messages: int, timeout: float, tls_ca: str | None = None
) -> dict[str, Any]:
    """One publisher/consumer run on a fresh copy of the scenario's queue (and exchange); over
    TLS when `tls_ca` is given (the broker's port is then its TLS port)."""
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
        tls_ca=tls_ca,
    )
    deadline = time.monotonic() + timeout
    setup = Connection.open(broker.host, broker.port, timeout=timeout, tls_ca=tls_ca)
    try:
        declare(setup, s)
        return measure(work, broker, [broker], deadline)
    finally:
        try:
            remove(setup, s)
        finally:
            setup.close()


def run_broker(name: str, settings: Settings) -> dict[str, Any]:
    print(f"{name}: starting", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"amq-bench-{name}-") as tmp:
        try:
            with _start(name, Path(tmp), settings) as broker:
                server = brokers.server_properties(broker)
                scenarios = {
                    s.key: repeat(
                        s.key,
                        s.title,
                        1 if s.rate else settings.repeat,  # paced: one run
                        partial(run_once, broker, s, settings.messages, settings.timeout),
                    )
                    for s in SCENARIOS
                }
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
        "federation": {},
    }
    skipped = {"status": "skipped", "note": f"--only {only}"}
    for name in BROKERS:
        results["brokers"][name] = run_broker(name, settings) if only in (None, name) else skipped
    for name in BROKERS:
        chosen = only in (None, "federation")
        results["federation"][name] = federation.run_suite(name, settings) if chosen else skipped
    results["fanout"] = fanout.run_suite(settings) if only in (None, "fanout") else skipped
    results["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    return results
