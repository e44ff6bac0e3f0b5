"""simulations.procstats.PeakMemory: the peak of a whole process tree (amq-sim's driver with
its JVM and Python workers), not of the process alone."""

from __future__ import annotations

import subprocess
import sys
import time

from simulations.procstats import PeakMemory, status_kb

#: What the child holds, in kB.
CHILD_KB = 300_000


def test_the_peak_counts_the_children() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", f"b = bytearray({CHILD_KB} * 1024); import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        with PeakMemory(every=0.05) as memory:
            while status_kb(child.pid, "VmRSS") < CHILD_KB and time.monotonic() < deadline:
                time.sleep(0.05)
            own = status_kb(memory.root, "VmRSS")
            while memory.peak_kb < own + CHILD_KB and time.monotonic() < deadline:
                time.sleep(0.05)  # the sampler's next reading
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert memory.peak_kb >= own + CHILD_KB
    assert status_kb(child.pid, "VmRSS") == 0  # gone: the peak outlives it
