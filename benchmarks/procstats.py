"""Broker resource use from /proc, over the whole process tree the harness started.

Summing over the tree is what makes the two brokers comparable: RabbitMQ is a shell script
whose child beam.smp does the work (plus erl_child_setup helpers), and our node may grow
helper processes too. Linux only.
"""

from __future__ import annotations

import os
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
    total_kb = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024
