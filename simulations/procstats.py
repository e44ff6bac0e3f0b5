"""Resource use from /proc, over a whole process tree: amq-sim's peak memory (the driver and
its children: Spark's JVM and Python workers), and the benchmarks' brokers.

Summing over the tree is what makes figures comparable: RabbitMQ is a shell script whose child
beam.smp does the work (plus erl_child_setup helpers), our node may grow helper processes too,
and a Spark run's memory is mostly in its JVM and Python workers, not in the driver. Linux
only (elsewhere a tree reads as empty).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    # The command name may contain spaces; every field after it is at a fixed index.
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """root and all its descendants that are alive now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """utime + stime per pid, in clock ticks."""
    ticks = {}
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        ticks[pid] = int(fields[11]) + int(fields[12])
    return ticks


def cpu_seconds_between(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU spent between two readings; a process born in between counts from zero."""
    return sum(t - before.get(pid, 0) for pid, t in after.items()) / CLOCK_TICKS


def reset_peak_rss(pids: list[int]) -> bool:
    """Reset VmHWM to the current RSS (clear_refs 5), so the next peak is this scenario's."""
    try:
        for pid in pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb(pids: list[int]) -> float:
    """Sum of VmHWM over the tree, in MiB."""
    return sum(status_kb(pid, "VmHWM") for pid in pids) / 1024


def status_kb(pid: int, field: str) -> int:
    """A `field:` line of /proc/PID/status in kB (0: gone, or no such line)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class PeakMemory:
    """The largest resident memory of the tree under `root` (this process by default), summed
    over its processes at one time, sampled every `every` seconds in a thread while in the
    `with` block (and once at each end). A child living less than `every` may be missed; the
    root's own peak (VmHWM) is exact, and the figure is never below it."""

    def __init__(self, root: int | None = None, every: float = 1.0) -> None:
        self.root = os.getpid() if root is None else root
        self.every = every
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak memory", daemon=True)

    def __enter__(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.peak_kb = max(self.peak_kb, status_kb(self.root, "VmHWM"))

    def sample(self) -> None:
        self.peak_kb = max(self.peak_kb, sum(status_kb(pid, "VmRSS") for pid in process_tree(self.root)))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()
