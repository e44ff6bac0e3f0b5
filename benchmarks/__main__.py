"""``python -m benchmarks run``: run the scenarios, write the Markdown report and the JSON."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from . import backlog, brokers, harness, memory, permissions, report, simulation, tls, workers

RESULTS_JSON = Path(__file__).parent / "results" / "latest.json"
BACKLOG_JSON = Path(__file__).parent / "results" / "backlog.json"
MEMORY_JSON = Path(__file__).parent / "results" / "memory.json"
TLS_JSON = Path(__file__).parent / "results" / "tls.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="benchmark the brokers and write the report")
    run.add_argument("--messages", type=int, default=100_000, help="messages per run")
    run.add_argument(
        "--only",
        choices=list(harness.ONLY),
        help="one broker's single-node scenarios, the federation scenarios on both brokers, "
        "or the fanout federation scenarios (amq-gateway only)",
    )
    run.add_argument(
        "--repeat", type=int, default=3, help="runs per throughput scenario; the median is reported"
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds before a run is aborted and reported as failed",
    )
    run.add_argument(
        "--gateway",
        type=Path,
        default=brokers.default_gateway_command(),
        help="amq-gateway executable (default: the one in this virtualenv)",
    )
    run.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"), help="Markdown report to write")
    under = sub.add_parser("backlog", help="confirm latency while a backlog is requeued and drained")
    under.add_argument("--messages", type=int, default=200_000, help="messages in the backlog")
    under.add_argument("--gateway", type=Path, default=brokers.default_gateway_command())
    under.add_argument("--only", choices=backlog.BROKERS, help="one broker (the section still shows both)")
    under.add_argument(
        "--out", type=Path, default=Path("docs/benchmarks.md"), help="report to put its section in"
    )
    secure = sub.add_parser("tls", help="one node's throughput over TLS against plain TCP, same run")
    secure.add_argument("--messages", type=int, default=100_000, help="messages per run")
    secure.add_argument(
        "--repeat", type=int, default=3, help="runs per scenario and transport (median shown)"
    )
    secure.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is aborted")
    secure.add_argument("--gateway", type=Path, default=brokers.default_gateway_command())
    secure.add_argument(
        "--out", type=Path, default=Path("docs/benchmarks.md"), help="report to put its section in"
    )
    piles = sub.add_parser("memory", help="memory while a backlog piles up with no consumer, then its drain")
    for key, size, default in memory.SIZES:
        piles.add_argument(
            f"--{key}",
            type=int,
            default=default,
            metavar="N",
            help=f"messages of {size:,} bytes (default {default:,})",
        )
    piles.add_argument(
        "--seconds", type=float, default=300.0, help="time limit of each pile-up (default 300)"
    )
    piles.add_argument("--gateway", type=Path, default=brokers.default_gateway_command())
    piles.add_argument("--only", choices=memory.BROKERS, help="one broker")
    piles.add_argument(
        "--out", type=Path, default=Path("docs/benchmarks.md"), help="report to put its section in"
    )
    checks = sub.add_parser(
        "permissions", help="what permission checks cost: transient and topic, interleaved"
    )
    checks.add_argument("--rounds", type=int, default=5, help="rounds of every variant (default 5)")
    checks.add_argument("--messages", type=int, default=100_000, help="messages per run")
    checks.add_argument("--gateway", type=Path, default=brokers.default_gateway_command())
    checks.add_argument(
        "--before",
        type=Path,
        help="an amq-gateway executable of the code before the checks, measured as variant 'before'",
    )
    checks.add_argument(
        "--out", type=Path, default=Path("docs/benchmarks.md"), help="report to put its section in"
    )
    sim = sub.add_parser("simulation", help="amq-sim: time and peak memory of both engines against nodes")
    sim.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    sim.add_argument(
        "--nodes",
        default=",".join(str(n) for n in simulation.NODES),
        help="node counts, comma-separated (default: %(default)s)",
    )
    sim.add_argument(
        "--engines", default=",".join(simulation.ENGINES), help="engines to run (default: %(default)s)"
    )
    sim.add_argument(
        "--timeout", type=float, default=simulation.TIMEOUT_S, help="seconds before a run is stopped"
    )
    sim.add_argument(
        "--cap",
        type=float,
        default=simulation.MEMORY_CAP_MB,
        help="MiB over a run's process tree before it is stopped (default: %(default)s)",
    )
    sim.add_argument(
        "--out", type=Path, default=Path("docs/simulation.md"), help="document to put its section in"
    )
    spread = sub.add_parser("workers", help="amq-sim: the Spark engine's speed-up per added worker")
    spread.add_argument(
        "--size",
        default="x".join(str(n) for n in workers.SIZE),
        help="HUBSxEDGESxEVENTS (default: %(default)s)",
    )
    spread.add_argument(
        "--workers",
        default=",".join(str(n) for n in workers.WORKERS),
        help="worker counts, one core each (default: %(default)s)",
    )
    spread.add_argument(
        "--out", type=Path, default=Path("docs/simulation.md"), help="document to put its section in"
    )
    args = parser.parse_args(argv)
    if getattr(args, "messages", 1) < 1 or getattr(args, "repeat", 1) < 1:
        parser.error("--messages and --repeat must be at least 1")
    python = os.path.relpath(sys.executable)
    command = shlex.join(
        [
            python if not python.startswith("..") else sys.executable,
            "-m",
            "benchmarks",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    if args.command == "simulation":
        try:
            nodes = tuple(int(n) for n in args.nodes.split(","))
        except ValueError:
            parser.error(f"--nodes must be node counts separated by commas, not {args.nodes!r}")
        engines = tuple(args.engines.split(","))
        if not set(engines) <= set(simulation.ENGINES):
            parser.error(f"--engines takes {', '.join(simulation.ENGINES)}, not {args.engines!r}")
        results = simulation.run(
            nodes,
            engines,
            args.master,
            args.timeout,
            args.cap,
            lambda found: simulation.write(found, args.out),
        )
        simulation.write(results, args.out)
        print(f"wrote {args.out} and {simulation.RESULTS_JSON}")
        return 0
    if args.command == "workers":
        try:
            worker_counts = tuple(int(n) for n in args.workers.split(","))
        except ValueError:
            parser.error(f"--workers must be worker counts separated by commas, not {args.workers!r}")
        results = workers.run(_size(parser, "--size", args.size), worker_counts)
        workers.write(results, args.out)
        print(f"wrote {args.out} and {workers.RESULTS_JSON}")
        return 0
    if args.command == "memory":
        counts = {key: getattr(args, key) for key, _, _ in memory.SIZES}
        results = memory.run(args.gateway, counts, args.seconds, command, args.only)
        memory.write_json(results, MEMORY_JSON)
        memory.write_markdown(results, args.out)
        print(f"wrote {args.out} and {MEMORY_JSON}")
        return 0
    if args.command == "tls":
        results = tls.run(args.messages, args.repeat, args.timeout, args.gateway, command)
        backlog.write_json(results, TLS_JSON)
        tls.write_markdown(results, args.out)
        print(f"wrote {args.out} and {TLS_JSON}")
        return 0
    if args.command == "permissions":
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        results = permissions.run(args.gateway, args.before, args.rounds, args.messages, command)
        permissions.write_json(results, permissions.RESULTS_JSON)
        permissions.write_markdown(results, args.out)
        print(f"wrote {args.out} and {permissions.RESULTS_JSON}")
        return 0
    if args.command == "backlog":
        results = backlog.run(args.messages, args.gateway, command, args.only)
        backlog.write_json(results, BACKLOG_JSON)
        backlog.write_markdown(results, args.out)
        print(f"wrote {args.out} and {BACKLOG_JSON}")
        return 0
    settings = harness.Settings(args.messages, args.repeat, args.timeout, args.gateway)
    results = harness.run(args.only, settings, command)
    report.write_json(results, RESULTS_JSON)
    report.write_markdown(results, args.out)
    print(f"wrote {args.out} and {RESULTS_JSON}")
    return 0


def _size(parser: argparse.ArgumentParser, option: str, text: str) -> tuple[int, int, int]:
    """HUBSxEDGESxEVENTS as three numbers, or the usage error that says so."""
    try:
        hubs, edges, events = (int(n) for n in text.split("x"))
    except ValueError:
        parser.error(f"{option} takes HUBSxEDGESxEVENTS (e.g. 5x6x100000), not {text!r}")
    return hubs, edges, events


if __name__ == "__main__":
    sys.exit(main())
