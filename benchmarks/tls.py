"""``python -m benchmarks tls``: what TLS costs, against plain TCP, on one node in the same run.

One amq-gateway node listens on a plain port and on a TLS port (a CA and a node certificate made
by `amq-gateway certs` in a temporary folder). Each scenario runs `--repeat` times plain and
`--repeat` times over TLS, alternating, with the same load tool (its sockets wrapped by
Python's ssl module, checking the node against the CA); the run with the median rate of each is
shown, with the ratio TLS / plain.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import brokers, sections
from .harness import machine, run_once
from .load import BODY_SIZE
from .scenarios import SCENARIOS

#: The scenarios measured: throughput without and with confirms, and to disk.
KEYS = ("transient", "confirms", "persistent")
TRANSPORTS = ("plain", "tls")


def _certs(command: Path, directory: Path) -> Path:
    """The CA and the node's certificate, made by the node's own `certs` command."""
    subprocess.run(
        [str(command), "certs", str(directory), "--nodes", "bench"], check=True, capture_output=True
    )
    return directory


def run(messages: int, repeat: int, timeout: float, gateway: Path, command: str) -> dict[str, Any]:
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(),
        "messages": messages,
        "body_bytes": BODY_SIZE,
        "repeat": repeat,
        "scenarios": {},
    }
    with tempfile.TemporaryDirectory(prefix="amq-bench-tls-") as tmp:
        certs = _certs(gateway, Path(tmp) / "certs")
        tls_port = brokers.spare_port()
        flags = ["--tls-port", str(tls_port), "--tls-ca", str(certs / "ca.pem")]
        flags += ["--tls-cert", str(certs / "bench.pem"), "--tls-key", str(certs / "bench.key")]
        with brokers.gateway(Path(tmp) / "node", gateway, extra=flags) as plain:
            over_tls = replace(plain, port=tls_port)
            for scenario in (s for s in SCENARIOS if s.key in KEYS):
                runs: dict[str, list[dict[str, Any]]] = {"plain": [], "tls": []}
                for _ in range(repeat):
                    runs["plain"].append(run_once(plain, scenario, messages, timeout))
                    runs["tls"].append(run_once(over_tls, scenario, messages, timeout, str(certs / "ca.pem")))
                    for transport in TRANSPORTS:
                        last = runs[transport][-1]
                        print(f"  {scenario.key} {transport}: {last['msg_per_s']:,.0f} msg/s", flush=True)
                chosen = {transport: _median(runs[transport]) for transport in TRANSPORTS}
                results["scenarios"][scenario.key] = {"title": scenario.title, **chosen}
    results["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    return results


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate; a run that lost or duplicated messages fails the scenario."""
    for run in runs:
        if run["lost"] or run["duplicated"]:
            raise RuntimeError(f"{run['lost']} messages lost, {run['duplicated']} duplicated")
    rate = statistics.median_low(run["msg_per_s"] for run in runs)
    return next(run for run in runs if run["msg_per_s"] == rate)


def render(results: dict[str, Any]) -> str:
    begin, end = sections.MARKERS["tls"]
    m = results["machine"]
    lines = [
        begin,
        "## TLS against plain TCP (issue 26)",
        "",
        f"Generated on {results['date']} ({results['duration_s']} s); rerun rather than edit:",
        "",
        f"    {results['command']}",
        "",
        f"- {m['nproc']} × {m['cpu_model']}; load average at start {' '.join(m['loadavg_at_start'])}.",
        f"- One amq-gateway node (data dir) with a plain and a TLS listener (`--tls-port`, a P-256 "
        f"certificate made by `amq-gateway certs`); {results['messages']:,} messages of "
        f"{results['body_bytes']} bytes per run, the load tool of the table above, its sockets "
        "wrapped by Python's `ssl` (TLS 1.3, the node checked against the CA).",
        f"- Plain and TLS runs alternate, {results['repeat']} of each per scenario; the run with the "
        "median rate is shown. Broker CPU is per message, the node's whole process.",
        "",
        "| scenario | plain msg/s | TLS msg/s | TLS / plain | plain p50 ms | TLS p50 ms | plain CPU µs/msg | TLS CPU µs/msg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in results["scenarios"].values():
        plain, tls = scenario["plain"], scenario["tls"]
        lines.append(
            f"| {scenario['title']} | {plain['msg_per_s']:,.0f} | {tls['msg_per_s']:,.0f} "
            f"| {tls['msg_per_s'] / plain['msg_per_s']:.2f} | {plain['p50_ms']:.2f} | {tls['p50_ms']:.2f} "
            f"| {plain['broker_cpu_us_per_msg']:.1f} | {tls['broker_cpu_us_per_msg']:.1f} |"
        )
    lines += ["", end, ""]
    return "\n".join(lines)


def write_markdown(results: dict[str, Any], path: Path) -> None:
    sections.put(path, "tls", render(results))
