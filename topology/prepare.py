"""A topology file made ready for work that touches nodes: loaded, checked, or refused.

`amq-route topology map|plan|apply` and `amq-gateway up` refuse a file the checks find errors
in, with the count and the command that lists them, so nothing is drawn, changed or started
from a topology known to be wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from topology.checks import run_checks
from topology.loader import TopologyError, load_topology
from topology.model import Topology


class Refused(Exception):
    """The file cannot be used; the message says why (one problem per line)."""


def load(path: Path) -> Topology:
    """The topology, or Refused with every load problem."""
    try:
        return load_topology(path)
    except TopologyError as error:
        raise Refused(str(error)) from None


def load_checked(path: Path, say: Callable[[str], None]) -> Topology:
    """The topology if the checks find no error; a count of its warnings goes to `say` (the
    findings themselves are `check`'s to list, not repeated before every command)."""
    topology = load(path)
    findings = run_checks(topology)
    errors = sum(finding.severity == "error" for finding in findings)
    if errors:
        raise Refused(f"{path}: {errors} error(s) found; `amq-route topology check {path}` lists them")
    warnings = sum(finding.severity == "warning" for finding in findings)
    if warnings:
        say(f"{path}: {warnings} warning(s); `amq-route topology check {path}` lists them")
    return topology
