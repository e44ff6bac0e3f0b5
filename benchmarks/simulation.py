"""``python -m benchmarks simulation``: the Spark engine against the reference engine on the
same generated scenarios, in the same run, at growing sizes (nodes, bindings, events); a table
and a log-log plot of the seconds each takes go into docs/simulation.md.

Each size runs the reference engine, the reference engine routing every class by its paths
(no aggregate routing of plain forests: the plain oracle), then the Spark engine on one
local[*] session started and warmed by one run beforehand (both reported apart: they are
paid once per run of amq-sim, not per size), each writing its Parquet tables; the tables must be equal, or the size
is reported as such.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulations import reference
from simulations.scenario import Scenario, load_scenario_text
from simulations.tables import COLUMNS, normalised, read, write_frame

from . import sections

#: (hubs, edges per hub, events wanted): the sizes measured by default.
SIZES = ((3, 3, 10_000), (5, 6, 100_000), (8, 10, 1_000_000))
DURATION = 60
RESULTS_JSON = Path(__file__).parent / "results" / "simulation.json"
PLOT = "simulation-scaling.png"


@dataclass
class Size:
    nodes: int
    bindings: int
    events: int
    classes: int
    reference_s: float
    by_class_s: float
    spark_s: float
    equal: bool


def scenario(hubs: int, edges: int, events: int) -> Scenario:
    """A hierarchy with topic subscribers on every node and every edge publishing, at the rate
    that makes `events` publishes in DURATION seconds."""
    rate = events / (hubs * edges * DURATION)
    return load_scenario_text(
        f"""[scenario]
name = "bench-{hubs}x{edges}-{events}"
seed = 5
duration = {DURATION}
step = 1
[topology]
generator = "hierarchy"
hubs = {hubs}
edges = {edges}
fanout_federation = "sim.fanout"
[links.default]
capacity_msgs = {max(100, int(rate * edges * 0.9))}
[keys]
words = [6, 6]
distribution = "zipf"
[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = {rate}
size = 600
[[subscribers]]
nodes = "*"
exchange = "sim.topic"
type = "topic"
count = 3
wildcards = 0.25
[[failures]]
link = ["root", "hub-000"]
from = 20
to = 30
""",
        str(Path("simulations") / "bench.toml"),
    )


def run(sizes: tuple[tuple[int, int, int], ...] = SIZES, master: str = "local[*]") -> dict[str, Any]:
    from spark import engine
    from spark.session import spark_session

    started = time.perf_counter()
    spark = spark_session(master)
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - started
    found = []
    try:
        # The first run on a session starts the Python workers and warms the JVM; timed apart,
        # as the session's start is, so that the sizes compare work with work.
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            engine.run(spark, scenario(*sizes[0]), tmp)
        warm_up_s = time.perf_counter() - started
        for hubs, edges, events in sizes:
            s = scenario(hubs, edges, events)
            with tempfile.TemporaryDirectory() as tmp:
                ref_out, by_class_out, spark_out = (
                    Path(tmp) / name for name in ("reference", "class", "spark")
                )
                t0 = time.perf_counter()
                reference.run(s, ref_out)
                t1 = time.perf_counter()
                for table, frame in reference.tables(s, forests=False).items():
                    write_frame(table, frame, by_class_out)
                t2 = time.perf_counter()
                engine.run(spark, s, str(spark_out))
                t3 = time.perf_counter()
                equal = all(
                    normalised(t, read(ref_out, t)).equals(normalised(t, read(out, t)))
                    for t in COLUMNS
                    for out in (by_class_out, spark_out)
                )
                published = int(read(ref_out, "nodes")["published"].sum())
            topology_bindings = len(reference_world_bindings(s))
            found.append(
                Size(
                    len(s.topology.nodes),
                    topology_bindings,
                    published,
                    classes(s),
                    t1 - t0,
                    t2 - t1,
                    t3 - t2,
                    equal,
                )
            )
            print(f"simulation benchmark: {found[-1]}", flush=True)
    finally:
        spark.stop()
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "master": master,
        "session_s": session_s,
        "warm_up_s": warm_up_s,
        "sizes": [asdict(size) for size in found],
    }


def reference_world_bindings(s: Scenario) -> list[Any]:
    from simulations.workload import with_subscribers

    return list(with_subscribers(s).bindings)


def classes(s: Scenario) -> int:
    """Classes of publish the workload can make (publishing nodes x keys)."""
    from simulations.workload import publishing

    return len(publishing(s)) * s.keys.size


def write(results: dict[str, Any], docs: Path) -> None:
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    _plot(results, docs.parent / PLOT)
    rows = [
        f"| {s['nodes']:,} | {s['bindings']:,} | {s['events']:,} | {s['reference_s']:.1f} | "
        f"{s['by_class_s']:.1f} | {s['spark_s']:.1f} | {s['reference_s'] / s['spark_s']:.2f} | "
        f"{s['by_class_s'] / s['spark_s']:.2f} | {'yes' if s['equal'] else '**NO**'} |"
        for s in results["sizes"]
    ]
    begin, end = sections.MARKERS["simulation"]
    text = "\n".join(
        [
            begin,
            f"Measured {results['when']} on {results['machine']}, Spark master `{results['master']}`, "
            f"by `python -m benchmarks simulation`; the session took {results['session_s']:.1f} s to start "
            f"and a first, untimed run of the smallest size {results['warm_up_s']:.1f} s (workers "
            "started, JVM warmed: both paid once per run of amq-sim, not counted below). Seconds end to end per scenario, Parquet written; "
            "`every class` is the reference engine routing every class by its paths "
            "(`reference.tables(..., forests=False)`), the plain oracle the tests compare with.",
            "",
            "| nodes | bindings | events | reference (s) | every class (s) | spark (s) | reference / spark "
            "| every class / spark | tables equal |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
            *rows,
            "",
            f"![seconds per run against events, log-log]({PLOT})",
            end,
            "",
        ]
    )
    sections.put(docs, "simulation", text)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = results["sizes"]
    events = [s["events"] for s in sizes]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.loglog(events, [s["reference_s"] for s in sizes], "o-", label="reference (one process)")
    axes.loglog(events, [s["by_class_s"] for s in sizes], "^-", label="reference, every class by its paths")
    axes.loglog(events, [s["spark_s"] for s in sizes], "s-", label=f"spark ({results['master']})")
    axes.set_xlabel("publish events")
    axes.set_ylabel("seconds")
    axes.set_title("amq-sim: cost against size")
    axes.legend()
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
