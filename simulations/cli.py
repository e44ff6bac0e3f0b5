"""`amq-sim`: run, check and generate scenarios, and report on a run's tables.

    amq-sim check SCENARIO
    amq-sim generate SPEC -o FILE        SPEC: a scenario file, or hierarchy:hubs=3,edges=4,seed=1
    amq-sim run SCENARIO [--out DIR] [--master URL] [--engine auto|spark|reference]
    amq-sim events SCENARIO -o FILE      FILE: NAME.parquet or NAME.csv
    amq-sim report DIR
    amq-sim validate SCENARIO [--var DIR]
    amq-sim capture --from TOPOLOGY [--duration 60s] -o WORKLOAD

Exit status: 0 done, 1 the scenario (or spec) has problems (each printed as
`file:line: key.path: message`), 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from simulations.auto import choose
from simulations.captured import CaptureError, Workload, duration_seconds, summary, workload_toml
from simulations.events import FORMATS, write_events
from simulations.generators import GeneratorSpec, generate, to_toml
from simulations.procstats import PeakMemory
from simulations.scenario import Scenario, ScenarioError, load_scenario
from simulations.tables import summary_lines
from simulations.validation import LiveCounts, LiveRunFailed
from topology.checks import has_errors, run_checks
from topology.loader import TopologyError, load_topology
from topology.model import Topology

#: Runs a scenario on live nodes (topology.validate.validate, handed in by the console script):
#: (scenario, directory for the nodes' data and logs, a line printer) -> what they counted.
LiveRunner = Callable[[Scenario, Path, Callable[[str], None]], LiveCounts]
#: Samples a running federation (topology.capture.capture, handed in likewise): (topology,
#: seconds, a line printer) -> the workload it did.
Capturer = Callable[[Topology, float, Callable[[str], None]], Workload]


def main(
    argv: list[str] | None = None, live: LiveRunner | None = None, capture: Capturer | None = None
) -> int:
    parser = argparse.ArgumentParser(
        prog="amq-sim", description="Traffic simulation of federated topologies."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="load a scenario and say what it holds, or every problem with it")
    check.add_argument("scenario", type=Path)
    gen = sub.add_parser("generate", help="write a generated topology out as a topology file")
    gen.add_argument(
        "spec", help="a scenario file with a generator, or NAME:key=value,... (docs/simulation.md)"
    )
    gen.add_argument("-o", "--output", type=Path, required=True, help="topology file to write")
    run = sub.add_parser("run", help="simulate a scenario and write its tables")
    run.add_argument("scenario", type=Path)
    run.add_argument(
        "--out", help="directory (or hdfs:// or s3a:// URL) for the tables (default: out/<name>)"
    )
    run.add_argument(
        "--master", help="Spark master URL (default: the one spark-submit was given, else local[*])"
    )
    run.add_argument(
        "--engine",
        choices=("auto", "spark", "reference"),
        default="auto",
        help="auto (the default): the reference engine where it is faster and fits in memory, else Spark",
    )
    run.add_argument("--partitions", type=int, default=8, help="Spark shuffle partitions (default: 8)")
    events = sub.add_parser("events", help="write a scenario's publish events, one row per message")
    events.add_argument("scenario", type=Path)
    events.add_argument(
        "-o", "--output", type=Path, required=True, help="file to write: NAME.parquet or NAME.csv"
    )
    report = sub.add_parser("report", help="write report.html with its plots into a run's directory")
    report.add_argument("out", type=Path)
    check_live = sub.add_parser(
        "validate", help="run a small scenario on live nodes and compare their counts with the simulation"
    )
    check_live.add_argument("scenario", type=Path)
    check_live.add_argument(
        "--var", type=Path, help="directory for the nodes' data and logs (default: a new temporary one)"
    )
    sampled = sub.add_parser(
        "capture", help="sample a running federation's counters and bindings into a workload file"
    )
    sampled.add_argument(
        "--from", dest="topology", type=Path, required=True, help="the federation's topology file"
    )
    sampled.add_argument(
        "--duration", type=_duration, default=60.0, help="the window: 60s (the default), 2m, 1.5h or seconds"
    )
    sampled.add_argument("-o", "--output", type=Path, required=True, help="workload file to write (TOML)")
    args = parser.parse_args(argv)
    if args.command == "capture":
        return _capture(args.topology, args.duration, args.output, capture)
    try:
        if args.command == "generate":
            return _generate(args.spec, args.output)
        if args.command == "report":
            from simulations.report import write_report

            print(f"report: {write_report(args.out)}")
            return 0
        if args.command == "events" and args.output.suffix not in FORMATS:
            parser.error(f"events: {args.output} must end in {' or '.join(FORMATS)}")
        scenario = load_scenario(args.scenario)
    except ScenarioError as err:
        print("\n".join(err.problems), file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"amq-sim: {err}", file=sys.stderr)
        return 1
    if args.command == "check":
        return _check(scenario)
    if args.command == "validate":
        if live is None:
            print("amq-sim: validate runs nodes: use the amq-sim console script", file=sys.stderr)
            return 2
        return _validate(scenario, args.var, live)
    if args.command == "events":
        written = write_events(scenario, args.output)
        print(f"wrote {args.output}: {_count(written, 'event')} of scenario {scenario.name}")
        return 0
    return _run(scenario, args.out or f"out/{scenario.name}", args.engine, args.master, args.partitions)


def _duration(text: str) -> float:
    try:
        return duration_seconds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _capture(path: Path, seconds: float, output: Path, capture: Capturer | None) -> int:
    """Sample the federation of the topology file at `path` into `output`."""
    if capture is None:
        print("amq-sim: capture reads live nodes: use the amq-sim console script", file=sys.stderr)
        return 2
    try:
        topology = load_topology(path)
    except TopologyError as err:
        print("\n".join(err.problems), file=sys.stderr)
        return 1
    try:
        workload = capture(topology, seconds, lambda line: print(line, flush=True))
    except CaptureError as err:
        print(f"amq-sim capture: {err}", file=sys.stderr)
        return 1
    relative = os.path.relpath(path.resolve(), output.resolve().parent)
    output.write_text(workload_toml(replace(workload, topology=relative)))
    print("\n".join(summary(workload)))
    print(f'wrote {output}: use it from a scenario with [workload] file = "..." (docs/simulation.md)')
    return 0


def _check(scenario: Scenario) -> int:
    topology = scenario.topology
    findings = [f for f in run_checks(topology) if f.severity == "error"]
    for finding in findings:
        print(finding)
    print(
        f"{scenario.path}: scenario {scenario.name}: {_count(len(topology.nodes), 'node')}, "
        f"{_count(len(topology.routes), 'route')}, {_count(len(topology.federations), 'federation')}, "
        f"{len(scenario.publishers)} publisher and {len(scenario.subscribers)} subscriber entries, "
        f"{_count(scenario.steps, 'step')} of {scenario.step:g} s, {_count(len(scenario.failures), 'failure')}"
    )
    return 1 if findings else 0


def _count(number: int, thing: str) -> str:
    return f"{number:,} {thing}" if number == 1 else f"{number:,} {thing}s"


def _generate(spec: str, output: Path) -> int:
    topology: Topology
    if Path(spec).is_file():
        topology = load_scenario(Path(spec)).topology
    else:
        topology = generate(GeneratorSpec.parse(spec))
    findings = run_checks(topology)
    if has_errors(findings):
        for finding in findings:
            print(finding, file=sys.stderr)
        return 1
    output.write_text(to_toml(topology))
    print(
        f"wrote {output}: {len(topology.nodes)} nodes, {len(topology.routes)} routes, {len(topology.federations)} federations"
    )
    return 0


def _progress(stage: str, fraction: float) -> None:
    print(f"amq-sim: {stage:<16} {fraction:6.1%}", file=sys.stderr, flush=True)


def _run(scenario: Scenario, out: str, engine: str, master: str | None, partitions: int) -> int:
    if engine == "auto":
        choice = choose(scenario, master)
        engine = choice.engine
        print(f"amq-sim: {choice}", file=sys.stderr, flush=True)
    started = time.monotonic()
    log = _spark_log(scenario, out) if engine == "spark" else None
    with PeakMemory() as memory:
        if log is None:
            from simulations import reference

            reference.run(scenario, Path(out), _throttled())
        elif not _run_spark(scenario, out, master, partitions, log):
            return 1
    seconds = time.monotonic() - started
    if "://" in out:  # hdfs://, s3a://: the driver cannot read the tables back to sum them up
        print(f"scenario {scenario.name} ({engine} engine, {seconds:.1f} s): tables in {out}")
    else:
        print("\n".join(summary_lines(scenario.name, engine, seconds, Path(out))))
    print(
        f"peak memory {memory.peak_kb * 1024 / 1e9:.2f} GB (amq-sim and its child processes, sampled every second)"
    )
    if log is not None:
        print(f"spark's log: {log}")
    return 0


def _validate(scenario: Scenario, var: Path | None, live: LiveRunner) -> int:
    """Simulate, run live, compare: exit 1 on any difference."""
    from simulations import reference
    from simulations.validation import compare, delay_lines, report_lines, simulated_counts

    tables = reference.tables(scenario)
    simulated = simulated_counts(tables)
    with tempfile.TemporaryDirectory(prefix="amq-sim-validate-") as scratch:
        try:
            counted = live(scenario, var or Path(scratch), lambda line: print(line, flush=True))
        except LiveRunFailed as err:
            print(f"amq-sim validate: {err}", file=sys.stderr)
            return 1
    rows = compare(simulated, counted)
    print("\n".join(delay_lines(tables["delays"], counted.delays)))
    print("\n".join(report_lines(rows)))
    return 0 if all(row.agrees for row in rows) else 1


def _spark_log(scenario: Scenario, out: str) -> Path:
    """Where the JVM's and Spark's output goes: the run's directory, or for a run writing to
    hdfs:// or s3a:// a file in the temporary directory."""
    if "://" in out:
        return Path(tempfile.gettempdir()) / f"amq-sim-{scenario.name}-spark.log"
    return Path(out) / "spark.log"


def _run_spark(scenario: Scenario, out: str, master: str | None, partitions: int, log: Path) -> bool:
    """Run the Spark engine, its JVM's output into `log`; False (said why) without Java or
    when the JVM does not start (what it said is in `log`)."""
    from pyspark.errors import PySparkRuntimeError

    from spark import engine as spark_engine
    from spark.progress import Poller
    from spark.session import JavaMissing, spark_session

    try:
        spark = spark_session(master, partitions, log=log)
    except JavaMissing as err:
        print(f"amq-sim: {err}", file=sys.stderr)
        return False
    except PySparkRuntimeError as err:
        print(
            f"amq-sim: Spark did not start ({err.getErrorClass()}); its output is in {log}", file=sys.stderr
        )
        return False
    try:
        with Poller(spark.sparkContext, _progress) as poller:
            spark_engine.run(spark, scenario, out, poller.at)
    finally:
        spark.stop()
    return True


def _throttled(every: float = 2.0) -> Callable[[str, float], None]:
    """Progress lines at most every `every` seconds (the reference reports per source)."""
    last = {"at": 0.0}

    def report(stage: str, fraction: float) -> None:
        now = time.monotonic()
        if now - last["at"] >= every or fraction >= 1.0:
            last["at"] = now
            _progress(stage, fraction)

    return report


if __name__ == "__main__":
    sys.exit(main())
