"""The import rules of docs/architecture.md ("Layers and import rules"), checked per module in a
fresh interpreter (what one module imports cannot hide what another does) and in its source
(an import inside a function counts too)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "federation", "topology", "simulations", "spark")
#: The modules that compose the node and the console scripts: the only ones in gateway/ that
#: know federation and the planner.
COMPOSITION_ROOTS = {"gateway.node", "gateway.cli"}
#: The planner's offline modules: they read a topology file and reason about it, so they load
#: (in a PySpark job too) without the node's event loop, store or broker model.
OFFLINE_TOPOLOGY = (
    "topology.model",
    "topology.loader",
    "topology.schema",
    "topology.graph",
    "topology.flow",
    "topology.tree_interest",
    "topology.checks",
    "topology.checks_graph",
    "topology.checks_references",
)

_PROBE = """
import importlib, json, sys
if sys.argv[1]:
    importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _module_names() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _loaded_by(module: str) -> frozenset[str]:
    """The modules loaded once `module` is imported ("": by the interpreter alone)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, module], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"importing {module} failed:\n{result.stderr}"
    return frozenset(json.loads(result.stdout))


def _imported_in_source(module: str) -> frozenset[str]:
    """Every module named by an import statement anywhere in `module`'s source."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return frozenset(names)


@cache
def loaded() -> dict[str, frozenset[str]]:
    """Every module of the project -> every module importing it alone loads, and every module
    its source imports."""
    names = _module_names()
    with ThreadPoolExecutor(max_workers=4) as pool:
        at_import = pool.map(_loaded_by, names)
    return {name: modules | _imported_in_source(name) for name, modules in zip(names, at_import, strict=True)}


def _offenders(modules: list[str], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for module in modules:
        hits = sorted(
            name
            for name in loaded()[module]
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden)
        )
        if hits:
            found[module] = hits
    return found


def _in(package: str) -> list[str]:
    return [name for name in loaded() if name == package or name.startswith(package + ".")]


def test_every_module_of_the_project_is_probed() -> None:
    assert {"gateway.wire.frames", "gateway.broker.session", "federation.requests", "topology.plan"} <= set(
        loaded()
    )


def test_wire_is_sans_io() -> None:
    assert _offenders(_in("gateway.wire"), ("trio", "sqlite3", "gateway.broker", "gateway.store")) == {}


def test_routing_imports_only_the_standard_library() -> None:
    at_start = _loaded_by("")  # site hooks such as an editable install's finder
    own = {"gateway", *_in("gateway.routing")}
    outside = {
        module: sorted(
            name
            for name in loaded()[module] - at_start
            if name not in own and name.split(".")[0] not in sys.stdlib_module_names
        )
        for module in _in("gateway.routing")
    }
    assert {module: names for module, names in outside.items() if names} == {}


def test_the_link_timing_imports_only_the_standard_library() -> None:
    """federation.timing is what the simulator shares with the links (their retry schedule,
    heartbeat and connect timeout), so it must load anywhere simulations do."""
    at_start = _loaded_by("")
    outside = sorted(
        name
        for name in loaded()["federation.timing"] - at_start
        if name.split(".")[0] not in sys.stdlib_module_names
        and name not in ("federation", "federation.timing")
    )
    assert outside == []


def test_the_offline_topology_modules_never_load_trio_sqlite_or_the_broker() -> None:
    assert set(OFFLINE_TOPOLOGY) <= set(loaded())
    assert _offenders(list(OFFLINE_TOPOLOGY), ("trio", "sqlite3", "gateway.broker")) == {}


def test_the_simulator_never_loads_trio_sqlite_or_the_broker() -> None:
    """spark/ and simulations/ route with gateway.routing through the offline planner modules;
    they run in Spark's Python workers, which have no event loop, store or broker."""
    modules = _in("spark") + _in("simulations")
    assert {"spark.jobs", "simulations.world"} <= set(modules)
    assert _offenders(modules, ("trio", "sqlite3", "gateway.broker", "gateway.store")) == {}


def test_the_broker_model_does_no_io_and_knows_no_store_or_federation() -> None:
    """Nor security: it asks its access port (gateway.broker.access), which the node wires."""
    forbidden = ("trio", "sqlite3", "gateway.store", "gateway.security", "federation", "topology")
    assert _offenders(_in("gateway.broker"), forbidden) == {}


def test_only_the_composition_roots_in_gateway_know_federation_and_the_planner() -> None:
    others = [name for name in _in("gateway") if name not in COMPOSITION_ROOTS]
    assert _offenders(others, ("federation", "topology")) == {}


def test_federation_never_imports_the_planner() -> None:
    assert _offenders(_in("federation"), ("topology",)) == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_nothing_imports_the_command_lines_of_federation(package: str) -> None:
    """Only the console scripts' composer (gateway.cli) may; the CLIs themselves are argv to
    requests to text."""
    importers = [
        name for name in _in(package) if not name.startswith("federation.cli") and name != "gateway.cli"
    ]
    assert _offenders(importers, ("federation.cli",)) == {}
