"""Fixtures shared by the integration tests: real node processes on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nodes import NodeProcess, start_node

#: The Spark tests' folder, as node ids start.
SPARK_TESTS = "tests/spark/"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (`./dev test`) tests go to workers one by one, except tests/spark,
    which all go to one worker: the suite starts one SparkSession (one JVM) rather than one
    per worker on the same cores. (xdist's own `--dist loadgroup` cannot do it under pytest
    9: it renames the node ids through an attribute pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SparkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SPARK_TESTS if nodeid.startswith(SPARK_TESTS) else nodeid

    return SparkTogether(config, log)


@pytest.fixture(scope="session")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One in-memory node for tests that only need a broker; tests use their own queue names."""
    node = start_node(tmp_path_factory.mktemp("shared-node"), name="shared")
    yield node
    node.stop()


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node of the test's own, with a data dir, for tests that restart, kill or count."""
    node = start_node(tmp_path, data_dir=tmp_path / "data", name="fresh")
    yield node
    if node.process.poll() is None:
        node.stop()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., NodeProcess]]:
    """Start named nodes for one test (`nodes(name, *serve_flags, data_dir=..., port=...)`);
    every one still running is stopped at the end."""
    started: list[NodeProcess] = []

    def start(name: str, *extra: str, **options: Any) -> NodeProcess:
        node = start_node(tmp_path / name, *extra, name=name, **options)
        started.append(node)
        return node

    yield start
    for node in started:
        if node.process.poll() is None:
            node.stop()
