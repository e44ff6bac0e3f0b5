"""The planner's checks: `run_checks(topology)` runs every check in CHECKS and returns their
findings, errors first; `amq-route topology check FILE` prints them and fails on errors.

Each check is a small function `check_<name>(topology) -> Iterator[Finding]`:
topology.checks_references has the declaration checks (references, duplicates, addresses,
the rules the nodes enforce when applying), topology.checks_graph the graph checks (loops and
multiple paths, reachability, resilience). docs/topology-checks.md lists every code with an
example finding and its fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from topology.checks_graph import (
    check_articulation_points,
    check_bridges,
    check_cut_off_nodes,
    check_diameter,
    check_dynamic_paths,
    check_loops,
    check_multiple_paths,
    check_unreached_bindings,
    check_unrouted_publishers,
)
from topology.checks_references import (
    check_duplicate_bindings,
    check_duplicate_exchanges_and_queues,
    check_duplicate_links,
    check_duplicate_nodes,
    check_duplicate_routes,
    check_durable_routes,
    check_dynamic_exchanges,
    check_dynamic_push,
    check_dynamic_tags,
    check_excludes,
    check_federated_dynamic,
    check_federated_twice,
    check_federation_exchanges,
    check_self_links,
    check_shared_endpoints,
    check_unfederatable,
    check_unknown_exchanges,
    check_unknown_nodes,
    check_unknown_queues,
)
from topology.model import Finding, Topology

Check = Callable[[Topology], Iterator[Finding]]

CHECKS: tuple[Check, ...] = (
    check_unknown_nodes,
    check_unknown_exchanges,
    check_unknown_queues,
    check_duplicate_nodes,
    check_duplicate_exchanges_and_queues,
    check_duplicate_bindings,
    check_duplicate_links,
    check_duplicate_routes,
    check_federated_twice,
    check_shared_endpoints,
    check_self_links,
    check_durable_routes,
    check_dynamic_exchanges,
    check_dynamic_push,
    check_dynamic_tags,
    check_excludes,
    check_federation_exchanges,
    check_unfederatable,
    check_federated_dynamic,
    check_loops,
    check_multiple_paths,
    check_dynamic_paths,
    check_unreached_bindings,
    check_unrouted_publishers,
    check_cut_off_nodes,
    check_articulation_points,
    check_bridges,
    check_diameter,
)

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _where_key(where: str) -> list[object]:
    """`file:12: routes[2]` sorted as people read it: numbers by value."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", where)]


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors, then warnings, then info; each by where (file, line), in check order on ties."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], _where_key(f.where)))


def run_checks(topology: Topology) -> list[Finding]:
    """Every check's findings, errors first, then by where."""
    return sort_findings(finding for check in CHECKS for finding in check(topology))


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(finding.severity == "error" for finding in findings)
