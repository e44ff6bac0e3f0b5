"""``python -m benchmarks workers``: the Spark engine's speed-up per added worker on a
standalone cluster started on this machine (spark.standalone), for docs/simulation.md.

For each worker count, a fresh master and that many workers of one core each; one driver
session on it; the same generated scenario as `benchmarks simulation` run by the Spark engine,
Parquet written, after one warm-up run on the same session (the first run of a session pays for
its Python workers and JIT). The session's start is reported apart. The tables of every count
are checked equal to the first count's: a worker count changes the speed, never the answer.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulations.tables import COLUMNS, normalised, read

from . import sections
from .simulation import SIZES, scenario

#: (hubs, edges per hub, events wanted): the largest size `benchmarks simulation` measures.
SIZE = SIZES[-1]
WORKERS = (1, 2)
#: Shuffle partitions, the same for every worker count.
PARTITIONS = 8
RESULTS_JSON = Path(__file__).parent / "results" / "workers.json"


def run(size: tuple[int, int, int] = SIZE, counts: tuple[int, ...] = WORKERS) -> dict[str, Any]:
    from spark import engine
    from spark.session import spark_session
    from spark.standalone import standalone_cluster

    s = scenario(*size)
    found: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="amq-bench-workers-") as tmp:
        first: dict[str, Any] | None = None
        for count in counts:
            with standalone_cluster(Path(tmp) / f"cluster-{count}", workers=count, cores=1) as url:
                started = time.perf_counter()
                spark = spark_session(url, PARTITIONS, app=f"amq-sim workers={count}")
                spark.sparkContext.setLogLevel("ERROR")
                session_s = time.perf_counter() - started
                try:
                    engine.run(spark, s, str(Path(tmp) / f"warm-{count}"))
                    out = Path(tmp) / f"out-{count}"
                    t0 = time.perf_counter()
                    engine.run(spark, s, str(out))
                    seconds = time.perf_counter() - t0
                finally:
                    spark.stop()
            tables = {name: normalised(name, read(out, name)) for name in COLUMNS}
            first = tables if first is None else first
            equal = all(tables[name].equals(first[name]) for name in COLUMNS)
            found.append(
                {"workers": count, "cores": count, "session_s": session_s, "seconds": seconds, "equal": equal}
            )
            print(f"workers benchmark: {found[-1]}", flush=True)
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "size": list(size),
        "nodes": len(s.topology.nodes),
        "runs": found,
    }


def write(results: dict[str, Any], docs: Path) -> None:
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    runs = results["runs"]
    base = runs[0]["seconds"]
    rows = [
        f"| {r['workers']} | {r['cores']} | {r['session_s']:.1f} | {r['seconds']:.1f} | {base / r['seconds']:.2f} | "
        f"{'yes' if r['equal'] else '**NO**'} |"
        for r in runs
    ]
    hubs, edges, events = results["size"]
    begin, end = sections.MARKERS["workers"]
    text = "\n".join(
        [
            begin,
            f"Measured {results['when']} on {results['machine']} (load average at the end "
            f"{results['load']}), by `python -m benchmarks workers`: a standalone master and N "
            f"workers of one core each on this machine, the Spark engine on the benchmark's "
            f"hierarchy of {results['nodes']} nodes ({hubs} hubs x {edges} edges, {events:,} events wanted), "
            "one warm-up run per session, then the run timed (Parquet written).",
            "",
            "| workers | cores | session start (s) | run (s) | speed-up over 1 worker | tables equal |",
            "|---:|---:|---:|---:|---:|:---:|",
            *rows,
            end,
            "",
        ]
    )
    sections.put(docs, "workers", text)
