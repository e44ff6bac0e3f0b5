"""One measured run (a publisher and a consumer process against running brokers) and repeats.

Shared by the single-node scenarios and the federation ones: what differs between them is only
where the publisher and the consumer connect and which brokers' processes are measured.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from simulations.procstats import cpu_seconds_between, cpu_ticks, peak_rss_mb, process_tree, reset_peak_rss

from .brokers import RunningBroker
from .load import Workload, consumer_main, publisher_main


@dataclass(frozen=True)
class Settings:
    messages: int
    repeat: int
    timeout: float  # seconds per run, setup included
    gateway_command: Path


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


def _tree(measured: Sequence[RunningBroker]) -> list[int]:
    return [pid for broker in measured for pid in process_tree(broker.pid)]


def measure(
    work: Workload, consume_from: RunningBroker, measured: Sequence[RunningBroker], deadline: float
) -> dict[str, Any]:
    """Consume from one broker while publishing to work's; CPU and peak RSS of `measured`.

    The consumer is subscribed before the publisher starts, and the brokers' CPU is read
    around the publish-to-last-delivery span only.
    """
    ctx = multiprocessing.get_context("fork")
    consumer_work = replace(work, host=consume_from.host, port=consume_from.port)
    children: list[BaseProcess] = []
    try:
        consumer_pipe, child_end = ctx.Pipe()
        children.append(ctx.Process(target=consumer_main, args=(consumer_work, child_end), daemon=True))
        children[-1].start()
        _receive(consumer_pipe, deadline, "consumer")
        publisher_pipe, child_end = ctx.Pipe()
        children.append(ctx.Process(target=publisher_main, args=(work, child_end), daemon=True))
        children[-1].start()
        _receive(publisher_pipe, deadline, "publisher")
        tree = _tree(measured)
        before = cpu_ticks(tree)
        rss_reset = reset_peak_rss(tree)
        publisher_pipe.send("go")
        _, pub = _receive(publisher_pipe, deadline, "publisher")
        _, con = _receive(consumer_pipe, deadline, "consumer")
        tree = _tree(measured)
        cpu = cpu_seconds_between(before, cpu_ticks(tree))
        rss = peak_rss_mb(tree)
    finally:
        for child in children:
            _end(child)
    elapsed = (con["last_ns"] - pub["start_ns"]) / 1e9
    return {
        "msg_per_s": work.messages / elapsed,
        "p50_ms": con["p50_ms"],
        "p99_ms": con["p99_ms"],
        "max_ms": con["max_ms"],
        "lost": con["lost"],
        "duplicated": con["duplicated"],
        "broker_cpu_s": cpu,
        "broker_cpu_us_per_msg": cpu / work.messages * 1e6,
        "peak_rss_mb": rss,
        "peak_rss_is_per_run": rss_reset,
        "elapsed_s": elapsed,
        "publish_s": (pub["sent_ns"] - pub["start_ns"]) / 1e9,
        "confirmed_s": (pub["done_ns"] - pub["start_ns"]) / 1e9,
        "publisher_cpu_s": pub["cpu_s"],
        "consumer_cpu_s": con["cpu_s"],
    }


def repeat(key: str, title: str, runs: int, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a scenario `runs` times and keep the run with the median rate.

    The first failure ends the scenario: an exception, or a run that lost or duplicated
    messages (its counts are kept, for the report).
    """
    done: list[dict[str, Any]] = []
    for _ in range(runs):
        try:
            run = once()
        except Exception as exc:  # a failed scenario is reported, the others still run
            error = f"{type(exc).__name__}: {exc}"
            print(f"  {key}: FAILED: {error}", flush=True)
            return {"title": title, "ok": False, "error": error, "runs": done}
        done.append(run)
        if run["lost"] or run["duplicated"]:
            error = f"{run['lost']} messages lost, {run['duplicated']} duplicated or unexpected"
            print(f"  {key}: FAILED: {error}", flush=True)
            return {"title": title, "ok": False, "error": error, **run, "runs": done}
        print(
            f"  {key}: {run['msg_per_s']:,.0f} msg/s, p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms",
            flush=True,
        )
    median_rate = statistics.median_low(r["msg_per_s"] for r in done)
    chosen = next(r for r in done if r["msg_per_s"] == median_rate)
    return {"title": title, "ok": True, **chosen, "runs": done}
