"""The SparkSession amq-sim runs on, and the check that Java is there before Spark is asked to
start it (Spark's own failure is a wall of JVM output)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

#: Java versions this pyspark runs on.
JAVA_VERSIONS = (17, 21)
LOOPBACK = "127.0.0.1"
MISSING_JAVA = "Java 17 not found: install openjdk-17-jre-headless (or set JAVA_HOME)"


class JavaMissing(RuntimeError):
    """No usable Java for Spark."""


def java_home() -> str:
    """JAVA_HOME if set, else the Java 17 install found on this machine; JavaMissing if none."""
    given = os.environ.get("JAVA_HOME")
    candidates = [Path(given)] if given else []
    candidates += sorted(Path("/usr/lib/jvm").glob("java-17-*")) + sorted(
        Path("/usr/lib/jvm").glob("java-21-*")
    )
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    for home in candidates:
        if _version(home / "bin" / "java") in JAVA_VERSIONS:
            return str(home)
    raise JavaMissing(MISSING_JAVA)


def _version(java: Path) -> int | None:
    if not java.exists():
        return None
    result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    words = result.stderr.split('"')
    if len(words) < 2:
        return None
    major = words[1].split(".")[0]
    return int(major) if major.isdigit() else None


def spark_session(
    master: str | None = None, partitions: int = 8, app: str = "amq-sim", log: Path | None = None
) -> SparkSession:
    """A session on `master` (None: the master spark-submit was given, else local[*]); shuffles
    use `partitions` partitions (the tables are small next to Spark's default of 200), which
    adaptive execution coalesces down to the cores' count for small shuffles (the default
    parallelism stays Spark's: the cores; at 8 a small run's tiny shuffles each ran 8 tasks
    on 2 cores), the UI stays off and executors run this Python. The driver listens on loopback only for a local
    master or one on this host; a cluster's executors must reach it at its own address.
    With `log`, the JVM's output (log4j, its start-up warnings, and its Python workers')
    goes to that file rather than to this process's console."""
    os.environ.setdefault("JAVA_HOME", java_home())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if master is None and not submitted():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
        if on_this_host(master):
            builder = builder.config("spark.driver.bindAddress", LOOPBACK).config(
                "spark.driver.host", LOOPBACK
            )
    if log is None:
        return builder.getOrCreate()
    with _output_to(log):
        return builder.getOrCreate()


@contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors 1 and 2) written to `log` while
    in the block: the JVM pyspark starts inherits them for its whole life (and its Python
    workers from it), and so writes every line there, from its first."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log.open("wb") as file:
            os.dup2(file.fileno(), 1)
            os.dup2(file.fileno(), 2)
        yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def submitted() -> bool:
    """Whether spark-submit started this Python (it hands the driver its JVM's gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def on_this_host(master: str) -> bool:
    """A local[...] master, or a standalone one on a loopback address."""
    if master.startswith("local"):
        return True
    host = urlsplit(master).hostname
    return host in ("localhost", LOOPBACK)
