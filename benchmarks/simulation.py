"""``python -m benchmarks simulation``: both engines on regions-10k's shape at growing sizes
(1,000 to 100,000 nodes: a root, a hub per 100 nodes, 100 bindings and 1,000 publishes per
node), each size and engine as `amq-sim run` in a process of its own, its whole process tree
(driver, JVM, Python workers) sampled every second for memory and CPU time. A run over the
memory cap or the time limit is stopped and reported as such, with the peak it had reached.
Where both engines finish, their tables must be equal. The table and a plot go into
docs/simulation.md.

`scenario` and SIZES are the small hierarchies `python -m benchmarks workers` runs.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulations.procstats import CLOCK_TICKS, process_tree
from simulations.scenario import Scenario, load_scenario_text
from simulations.tables import COLUMNS, normalised, read
from simulations.workload import publishing, step_counts

from . import sections

#: (hubs, edges per hub, events wanted): `python -m benchmarks workers`'s sizes.
SIZES = ((3, 3, 10_000), (5, 6, 100_000), (8, 10, 1_000_000))
DURATION = 60
#: Nodes of the scale table's scenarios.
NODES = (1_000, 10_000, 50_000, 100_000)
ENGINES = ("spark", "reference")
#: A run is stopped past these: seconds, and MiB over its whole process tree.
TIMEOUT_S = 1800.0
MEMORY_CAP_MB = 14_000.0
RESULTS_JSON = Path(__file__).parent / "results" / "simulation.json"
PLOT = "simulation-scaling.png"


@dataclass
class Measured:
    """One engine's run of one size."""

    nodes: int
    bindings: int
    events: int
    engine: str
    #: "finished", "failed (exit N)", "over the memory cap" or "over the time limit".
    outcome: str
    wall_s: float
    cpu_s: float
    #: Peak of the sum of every process's resident memory, sampled each second (MiB).
    peak_tree_mb: float
    #: The largest peak (VmHWM) of any one process of the tree, and which (MiB).
    peak_process_mb: float
    peak_process: str
    equal: bool | None = None


def regions(nodes: int) -> str:
    """simulations/regions-10k.toml's shape at `nodes` nodes (a hub per 100 nodes; 2 topic
    and 98 audit bindings per node; each edge node publishing 1.6855 msg/s for 600 s)."""
    return f"""[scenario]
name = "regions-{nodes}"
seed = 10_000
duration = 600
step = 5.0
[topology]
generator = "hierarchy"
seed = 10_000
hubs = {max(1, nodes // 100)}
nodes = {nodes}
fanout_federation = "sim.fanout"
[links.default]
latency_ms = 5
capacity_msgs = 20_000
capacity_bytes = 40_000_000
[keys]
words = [10, 10, 10]
distribution = "zipf"
zipf_s = 1.1
[[publishers]]
nodes = "edge-*"
exchange = "sim.topic"
rate = 1.6855
size = 512
[[subscribers]]
nodes = "*"
exchange = "sim.topic"
type = "topic"
queue = "feed"
count = 2
wildcards = 0.3
[[subscribers]]
nodes = "*"
exchange = "sim.fanout"
type = "direct"
queue = "audit"
count = 98
"""


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


def measure(
    command: list[str], log: Path, timeout_s: float, cap_mb: float
) -> tuple[str, float, float, float, float, str]:
    """Run `command` in a session of its own, its output into `log`, sampling its process
    tree every second: (outcome, wall s, CPU s, peak tree MiB, largest process peak MiB, that
    process). The whole session is stopped past the time limit or the memory cap."""
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    ticks: dict[int, int] = {}
    peaks: dict[int, tuple[float, str]] = {}
    peak_tree = 0.0
    outcome = "finished"
    while process.poll() is None:
        total = 0.0
        for pid in process_tree(process.pid):
            found = _status(pid)
            if found is not None:
                rss, hwm, cpu, name = found
                total += rss
                ticks[pid] = max(ticks.get(pid, 0), cpu)
                if hwm > peaks.get(pid, (0.0, ""))[0]:
                    peaks[pid] = (hwm, name)
        peak_tree = max(peak_tree, total)
        over = "over the memory cap" if total > cap_mb else None
        over = over or ("over the time limit" if time.monotonic() - started > timeout_s else None)
        if over:
            outcome = over
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            break
        time.sleep(1.0)
    wall = time.monotonic() - started
    if outcome == "finished" and process.returncode != 0:
        outcome = f"failed (exit {process.returncode})"
        print(log.read_text(errors="replace")[-2000:], file=sys.stderr)
    largest, name = max(peaks.values(), default=(0.0, "-"))
    return outcome, wall, sum(ticks.values()) / CLOCK_TICKS, peak_tree, largest, name


def _status(pid: int) -> tuple[float, float, int, str] | None:
    """(resident MiB, peak resident MiB, CPU ticks, short name) of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    values = {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Vm")}
    fields = stat[stat.rindex(")") + 2 :].split()
    words = [w.decode(errors="replace") for w in cmdline if w]
    name = "java" if words and words[0].endswith("java") else " ".join(words[1:3]) if len(words) > 1 else "?"
    return (
        int(values.get("VmRSS", 0)) / 1024,
        int(values.get("VmHWM", 0)) / 1024,
        int(fields[11]) + int(fields[12]),
        name,
    )


def run(
    nodes: tuple[int, ...] = NODES,
    engines: tuple[str, ...] = ENGINES,
    master: str = "local[*]",
    timeout_s: float = TIMEOUT_S,
    cap_mb: float = MEMORY_CAP_MB,
    measured_one: Callable[[dict[str, Any]], None] = lambda results: None,
) -> dict[str, Any]:
    """Every size with every engine; `measured_one` is given the results so far after each
    run (a long benchmark leaves what it measured if it is stopped)."""
    found: list[Measured] = []

    def results() -> dict[str, Any]:
        return {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "master": master,
            "timeout_s": timeout_s,
            "cap_mb": cap_mb,
            "runs": [asdict(m) for m in found],
        }

    with tempfile.TemporaryDirectory() as tmp:
        for count in nodes:
            path = Path(tmp) / f"regions-{count}.toml"
            path.write_text(regions(count))
            s = load_scenario_text(path.read_text(), str(path))
            events = sum(int(step_counts(s, s.publishers[e]).sum()) for e, _ in publishing(s))
            bindings = sum(sub.count for sub in s.subscribers) * len(s.topology.nodes)
            outs = {}
            for engine in engines:
                out = Path(tmp) / f"{engine}-{count}"
                command = [sys.executable, "-m", "simulations.cli", "run", str(path), "--engine", engine]
                command += ["--out", str(out)] + (["--master", master] if engine == "spark" else [])
                measured = Measured(
                    count,
                    bindings,
                    events,
                    engine,
                    *measure(command, Path(tmp) / f"{engine}-{count}.log", timeout_s, cap_mb),
                )
                found.append(measured)
                if measured.outcome == "finished":
                    outs[engine] = out
                print(f"simulation benchmark: {measured}", flush=True)
                measured_one(results())
            if len(outs) == 2:
                equal = all(
                    normalised(t, read(outs["reference"], t)).equals(normalised(t, read(outs["spark"], t)))
                    for t in COLUMNS
                )
                for measured in found[-2:]:
                    measured.equal = equal
                measured_one(results())
    return results()


def write(results: dict[str, Any], docs: Path) -> None:
    """The JSON and the document's section, with the runs of earlier invocations of sizes and
    engines this one did not run kept (so the largest sizes can be run apart)."""
    before = json.loads(RESULTS_JSON.read_text()).get("runs", []) if RESULTS_JSON.exists() else []
    ran = {(r["nodes"], r["engine"]) for r in results["runs"]}
    kept = [r for r in before if (r["nodes"], r["engine"]) not in ran]
    runs = sorted([*kept, *results["runs"]], key=lambda r: (r["nodes"], r["engine"]))
    results = {**results, "runs": runs}
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    _plot(results, docs.parent / PLOT)
    equal = {True: "yes", False: "**NO**", None: "-"}
    rows = [
        f"| {r['nodes']:,} | {r['bindings']:,} | {r['events']:,} | {r['engine']} | {r['outcome']} | "
        f"{r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_tree_mb'] / 1024:.1f} | "
        f"{r['peak_process_mb'] / 1024:.1f} ({r['peak_process']}) | {equal[r['equal']]} |"
        for r in results["runs"]
    ]
    begin, end = sections.MARKERS["simulation"]
    text = "\n".join(
        [
            begin,
            f"Measured {results['when']} on {results['machine']}, Spark master `{results['master']}`, by "
            f"`python -m benchmarks simulation`: each run is `amq-sim run` in a process of its own, Parquet "
            f"written, its whole process tree sampled every second; a run is stopped past "
            f"{results['timeout_s']:.0f} s or {results['cap_mb'] / 1024:.1f} GiB over the tree. CPU is "
            "the tree's user and system time (the machine is shared: wall time moves with its load, "
            "CPU time much less).",
            "",
            "| nodes | bindings | publishes | engine | outcome | wall (s) | CPU (s) | peak, process tree (GiB) "
            "| peak, largest process (GiB) | tables equal |",
            "|---:|---:|---:|:---|:---|---:|---:|---:|---:|:---:|",
            *rows,
            "",
            f"![seconds and peak memory against nodes]({PLOT})",
            end,
            "",
        ]
    )
    sections.put(docs, "simulation", text)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (seconds, memory) = plt.subplots(1, 2, figsize=(10, 4))
    for engine, mark in (("reference", "o-"), ("spark", "s-")):
        runs = [r for r in results["runs"] if r["engine"] == engine]
        done = [r for r in runs if r["outcome"] == "finished"]
        seconds.loglog([r["nodes"] for r in done], [r["wall_s"] for r in done], mark, label=engine)
        memory.semilogx(
            [r["nodes"] for r in runs], [r["peak_tree_mb"] / 1024 for r in runs], mark, label=engine
        )
    seconds.set_xlabel("nodes")
    seconds.set_ylabel("seconds (finished runs)")
    memory.set_xlabel("nodes")
    memory.set_ylabel("peak memory, process tree (GiB)")
    for axes in (seconds, memory):
        axes.legend()
    figure.suptitle("amq-sim: cost against size")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
