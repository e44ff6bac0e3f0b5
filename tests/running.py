"""A command running in the background whose output a test reads line by line, each wait
bounded (`amq-gateway up`, `amq-sim capture`)."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence


class RunningCommand:
    """The command's stdout and stderr, as lines, read by a thread of its own."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end of the output

    def expect(self, wanted: Callable[[str], bool], timeout: float) -> str:
        """The first line from now on for which `wanted` is true; fails if the command ends or
        is silent for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no such line within the bound:\n" + "".join(self.seen)) from None
            assert line, "the command ended first:\n" + "".join(self.seen)
            self.seen.append(line)
            if wanted(line):
                return line

    def rest(self, timeout: float) -> str:
        """The output from now on to the command's end (which comes within `timeout`)."""
        lines: list[str] = []
        while (line := self.lines.get(timeout=timeout)) != "":
            lines.append(line)
        self.seen += lines
        return "".join(lines)
