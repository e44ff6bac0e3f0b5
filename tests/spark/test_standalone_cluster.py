"""`amq-sim run --master spark://...`: a standalone Spark master and one worker, started on
loopback with the launcher the pyspark package ships (spark.standalone), run a scenario and
write the same tables as the reference engine (which local mode equals, see
test_engines_agree.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulations.scenario import load_scenario
from simulations.tables import COLUMNS, normalised, read
from spark.standalone import standalone_cluster
from tests.spark.conftest import assert_same_tables, reference_tables
from tests.spark.test_hop_routing import SECOND_TOPIC_PUBLISHER, fanout_hierarchy_scenario

#: Seconds for the run.
RUN_TIMEOUT = 300


@pytest.fixture
def master(tmp_path: Path) -> Iterator[str]:
    with standalone_cluster(tmp_path / "cluster", workers=1, cores=2) as url:
        yield url


def test_a_standalone_cluster_writes_the_same_tables(master: str, tmp_path: Path) -> None:
    """A hierarchy where publishes on one exchange go into a plain forest (routed in aggregate
    by spark.trees) and on the other through a fanout federation (routed class by class),
    with failures: both run on the executors and give the reference engine's tables."""
    fanout_hierarchy_scenario(tmp_path, 9, SECOND_TOPIC_PUBLISHER)
    path = tmp_path / "s.toml"
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulations.cli",
            "run",
            str(path),
            "--out",
            str(out),
            "--master",
            master,
            "--partitions",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(spark engine" in result.stdout
    # The console holds amq-sim's lines alone (auto took Spark for the master given); the
    # JVM's start-up noise is in the run's log.
    assert result.stderr.splitlines()[0].startswith("amq-sim: engine spark (auto: ")
    assert [line for line in result.stderr.splitlines() if not line.startswith("amq-sim: ")] == []
    assert f"spark's log: {out}/spark.log" in result.stdout.splitlines()
    assert "log4j" in (out / "spark.log").read_text()
    found = {table: normalised(table, read(out, table)) for table in COLUMNS}
    expected = reference_tables(load_scenario(path))
    assert expected["queues"]["delayed"].sum() > 0 and set(expected["queues"]["queue"]) >= {"sim", "audit"}
    assert_same_tables(found, expected)
