"""A standalone Spark cluster on loopback, started with the launcher the pyspark package ships
(bin/spark-class): a master and workers of a given size, for the cluster test and for measuring
the speed-up per added worker (`python -m benchmarks workers`). Nothing here is needed to run
on a real cluster: `amq-sim run --master spark://...` only needs its URL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from spark.session import LOOPBACK, java_home

SPARK_HOME = Path(pyspark.__file__).parent
#: Seconds a daemon may take to say it is up (the master elected, a worker registered).
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


class ClusterError(Exception):
    """A daemon exited or did not come up in time; the text ends with its log."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 1, cores: int = 2, memory: str = "1g") -> Iterator[str]:
    """Run a master and `workers` workers of `cores` cores and `memory` each, under `workdir`
    (logs, work and scratch directories); yields the master's URL and stops them all after."""
    workdir.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        master = _daemon(
            workdir,
            "master",
            started,
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        )
        _wait_for(workdir / "master.log", "I have been elected leader", master)
        url = f"spark://{LOOPBACK}:{port}"
        for number in range(workers):
            name = f"worker-{number}"
            worker = _daemon(
                workdir,
                name,
                started,
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                LOOPBACK,
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(workdir / name),
                "--webui-port",
                str(free_port()),
            )
            _wait_for(workdir / f"{name}.log", "Successfully registered with master", worker)
        yield url
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _daemon(
    workdir: Path, name: str, started: list[subprocess.Popen[bytes]], *args: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "JAVA_HOME": java_home(),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOCAL_DIRS": str(workdir / "local"),
        "PYSPARK_PYTHON": sys.executable,
    }
    with (workdir / f"{name}.log").open("wb") as out:
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    started.append(process)
    return process


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    """Poll the daemon's log for the line that says it is up (the launcher offers no other sign)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise ClusterError(f"{log.name} exited:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    raise ClusterError(
        f"no {text!r} in {log.name} within {START_TIMEOUT} s:\n{log.read_text(errors='replace')[-3000:]}"
    )
