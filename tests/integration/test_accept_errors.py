"""A node out of file descriptors logs the failing accepts once per burst and serves again after.

The accept loop used to log a full traceback for every retry, ten a second, for as long as the
descriptors stayed exhausted.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import time

from tests.integration.test_protocol_errors import assert_node_still_serves
from tests.nodes import NodeProcess

WAIT = 10.0
#: How long the descriptors stay exhausted: the node retries every 0.1 s, so the old code logged
#: about ten tracebacks in this time, and the new one must log the one line only (its summary
#: line, written when accepting works again, says how many retries there were).
BURST = 1.0
ERROR_LINE = re.compile(r"ERROR gateway\.server: accept failed \(\[Errno 24\] Too many open files\)")
SUMMARY = re.compile(
    r"accept failed (\d+) times over [\d.]+s \(EMFILE: Too many open files\); accepting again"
)


def wait_for(node: NodeProcess, pattern: re.Pattern[str]) -> re.Match[str]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        match = pattern.search(node.log())
        if match:
            return match
        time.sleep(0.02)
    raise AssertionError(f"no {pattern.pattern!r} within {WAIT}s; log:\n{node.log()[-3000:]}")


def test_emfile_in_accept_is_logged_once_per_burst_and_the_node_recovers(nodes) -> None:
    node = nodes("emfile")
    pid = node.process.pid
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 10, hard))  # ten connections more
    held = []
    try:
        for _ in range(20):  # ten are accepted, the rest wait in the listen backlog
            held.append(socket.create_connection(("127.0.0.1", node.port), timeout=WAIT))
        wait_for(node, ERROR_LINE)
        # Pacing, not the proof: the burst lasts long enough for several retries. The proof is
        # below, in the node's own count of them.
        time.sleep(BURST)
    finally:
        for sock in held:
            sock.close()
    # The summary line counts the failed accepts of the burst: several of them, one error line.
    failures = int(wait_for(node, SUMMARY).group(1))
    log = node.log()
    assert failures >= 2, log[-3000:]
    assert len(ERROR_LINE.findall(log)) == 1, log[-3000:]  # the summary is a warning
    assert "Traceback" not in log, log[-3000:]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert_node_still_serves(node)
