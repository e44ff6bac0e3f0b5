"""Starting clean: `amq-gateway clean FILE` and `up --fresh` remove what `up` keeps for the
file's nodes on this host (`<var>/<node>`: the store, with every message left in its queues,
and the log), so the demo does not pile up messages across runs.

A data dir that a running node holds (its LOCK file is locked, gateway.store) is never
removed: deleting a live node's store under it would lose its messages and confuse it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gateway.store import StoreLocked
from gateway.store.opening import lock_data_dir
from topology.model import Topology
from topology.processes import is_local


class InUse(Exception):
    """A node of the file is running on the state to remove; the message says which."""


def remove_state(topology: Topology, var: Path) -> list[Path]:
    """Remove `var/<node>` for each node of the topology on this host; the directories removed.
    InUse, before anything is removed, if a running node holds one of them."""
    found = [var / node.name for node in topology.nodes.values() if is_local(node.host)]
    found = [directory for directory in found if directory.is_dir()]
    locks: list[int] = []
    try:
        for directory in found:
            try:
                locks.append(lock_data_dir(directory))
            except StoreLocked as locked:
                raise InUse(
                    f"not removing {directory}: {locked}; stop that node (Ctrl-C its `up`) first"
                ) from None
        for directory in found:
            shutil.rmtree(directory)
    finally:
        for fd in locks:
            os.close(fd)
    return found
