"""`amq-sim run --master spark://...`: a standalone Spark master and one worker, started on
loopback with the launcher the pyspark package ships (bin/spark-class), run a scenario and
write the same tables as the reference engine (which local mode equals, see
test_engines_agree.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from simulations.scenario import load_scenario
from simulations.tables import COLUMNS, normalised, read
from spark.session import java_home
from tests.spark.conftest import SCENARIOS, assert_same_tables, reference_tables

SPARK_HOME = Path(pyspark.__file__).parent
#: Seconds for the worker to register with the master, and for the run.
REGISTER_TIMEOUT = 90
RUN_TIMEOUT = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def daemon(tmp: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"{name}.log"
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "JAVA_HOME": java_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp / "work"),
        "SPARK_LOCAL_DIRS": str(tmp / "local"),
        "PYSPARK_PYTHON": sys.executable,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    return process, log


def wait_for(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert process.poll() is None, f"{log.name} exited:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(
        f"no {text!r} in {log.name} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


@pytest.fixture
def master(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    started = []
    try:
        master, master_log = daemon(
            tmp_path,
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        )
        started.append(master)
        wait_for(master_log, "I have been elected leader", master, REGISTER_TIMEOUT)
        url = f"spark://127.0.0.1:{port}"
        worker, worker_log = daemon(
            tmp_path,
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "1g",
            "--webui-port",
            str(free_port()),
        )
        started.append(worker)
        wait_for(worker_log, "Successfully registered with master", worker, REGISTER_TIMEOUT)
        yield url
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
