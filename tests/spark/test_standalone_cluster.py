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
from tests.spark.conftest import SCENARIOS, assert_same_tables, reference_tables

#: Seconds for the run.
RUN_TIMEOUT = 300


@pytest.fixture
def master(tmp_path: Path) -> Iterator[str]:
    with standalone_cluster(tmp_path / "cluster", workers=1, cores=2) as url:
        yield url


def test_a_standalone_cluster_writes_the_same_tables(master: str, tmp_path: Path) -> None:
    path = SCENARIOS / "corners.toml"
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
    assert "scenario corners (spark engine" in result.stdout
    found = {name: normalised(name, read(out, name)) for name in COLUMNS}
    assert_same_tables(found, reference_tables(load_scenario(path)))
