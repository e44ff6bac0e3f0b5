"""The client test suites: where each comes from, how it runs against a node, and how to count
its outcome.

Each suite is the client's own, as its CI runs it against RabbitMQ; only what points it at a
broker changes (an environment variable, or the Docker stub for aio-pika and aiormq). Versions
are pinned so that docs/clients.md's counts can be compared run to run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PIKA = "1.4.4"
AIO_PIKA = "10.2.1"
AIORMQ = "7.2.4"
PY_AMQP = "5.4.2"
AMQPLIB = "v2.0.1"
AMQP091_GO = "v1.14.0"

#: Test tools and adapters the Python suites import, besides the clients themselves.
PYTHON_TEST_DEPS = [
    f"pika=={PIKA}",
    f"aio-pika=={AIO_PIKA}",
    f"aiormq=={AIORMQ}",
    "pytest",
    "pytest-timeout",
    "aiomisc",
    "aiomisc-pytest",
    "shortuuid",
    "timeout-decorator",
    "vine",  # py-amqp's one dependency (its suite imports the sdist's own amqp/)
    "pytest-rerunfailures",  # py-amqp marks its integration tests flaky(reruns=5)
    "tornado",
    "twisted",
    "gevent",
    # Build backends for the sdists' metadata on download (without build isolation): uv's for
    # aio-pika and aiormq, setuptools' for py-amqp.
    "uv_build",
    "setuptools",
    "wheel",
]

#: aio-pika's test files that need what the node has not: TLS on 5671, and `rabbitmqctl
#: stop_app` inside the Docker container.
AIO_PIKA_NOT_RUN = ["tests/test_amqps.py", "tests/test_robust_recovery.py"]

#: amqp091-go's flow test asserts that Channel.Flow(false) fails (RabbitMQ's 540) and panics
#: when it succeeds, which ends the whole run; we keep the spec's flow (docs/amqp.md).
GO_NOT_RUN = ["TestIntegrationConsumeFlow"]


@dataclass(frozen=True)
class Counts:
    """One run's outcome, in the suite's own terms (cancelled: node --test's timeouts; not run:
    deselected by the runner here, see docs/clients.md)."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    cancelled: int = 0
    not_run: int = 0


@dataclass(frozen=True)
class Suite:
    """A client's suite: `fetch` puts it under the work dir and returns its source directory,
    `command(work, source)` runs it there, with `env(work, url)`; `count` reads its output."""

    name: str
    version: str
    fetch: Callable[[Path], Path]
    command: Callable[[Path, Path], list[str]]
    env: Callable[[Path, str], dict[str, str]]
    count: Callable[[str], Counts]


def sh(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """Run a preparation step; its failure ends the script with the step's output."""
    subprocess.run(args, cwd=cwd, env=env, check=True)


def python_venv(work: Path) -> Path:
    """One venv for the Python suites, with the pinned clients and their test tools."""
    venv = work / "venv"
    if not (venv / "bin" / "python").exists():
        sh([sys.executable, "-m", "venv", str(venv)])
        sh([str(venv / "bin" / "pip"), "install", "-q", *PYTHON_TEST_DEPS])
    return venv


def git_checkout(work: Path, url: str, tag: str) -> Path:
    """A shallow clone of `tag` (the registries' packages ship no tests for these clients)."""
    target = work / "src" / f"{Path(url).name}-{tag}"
    if not target.exists():
        sh(["git", "clone", "-q", "--depth", "1", "--branch", tag, url, str(target)])
    return target


def sdist(work: Path, project: str, version: str) -> Path:
    """An sdist from PyPI, unpacked: aio-pika's and aiormq's ship their tests/."""
    venv = python_venv(work)
    target = work / "src" / f"{project.replace('-', '_')}-{version}"
    if not target.exists():
        downloads = work / "downloads"
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
        pip = [str(venv / "bin" / "pip"), "download", "-q", "--no-binary", ":all:", "--no-deps"]
        sh([*pip, "--no-build-isolation", f"{project}=={version}", "-d", str(downloads)], env=env)
        archive = downloads / f"{project.replace('-', '_')}-{version}.tar.gz"
        shutil.unpack_archive(archive, work / "src")
    return target


def fetch_pika(work: Path) -> Path:
    python_venv(work)
    return git_checkout(work, "https://github.com/pika/pika", PIKA)


def fetch_amqplib(work: Path) -> Path:
    source = git_checkout(work, "https://github.com/amqp-node/amqplib", AMQPLIB)
    # claire is the one dev dependency the tests import (property tests of the codec).
    sh(
        ["npm", "install", "-q", "--no-save", "--ignore-scripts", "--no-audit", "--no-fund", "claire@0.4.1"],
        cwd=source,
    )
    return source


def fetch_go(work: Path) -> Path:
    """The Go client at its tag. Its one test dependency (goleak) comes from the module proxy,
    or from Debian's golang-uber-goleak-dev where the proxy cannot be reached."""
    source = git_checkout(work, "https://github.com/rabbitmq/amqp091-go", AMQP091_GO)
    if subprocess.run(["go", "mod", "download"], cwd=source, env=go_env()).returncode != 0:
        debian = "/usr/share/gocode/src/go.uber.org/goleak"
        sh(["go", "mod", "edit", f"-replace=go.uber.org/goleak={debian}"], cwd=source)
    return source


def go_env(*_: object) -> dict[str, str]:
    return {**os.environ, "GOFLAGS": "-mod=mod"}


def python_env(work: Path, url: str) -> dict[str, str]:
    stub = Path(__file__).resolve().parent
    return {**os.environ, "AMQP_URL": url, "PYTHONPATH": str(stub)}


def _pytest(work: Path, tests: str, *options: str) -> list[str]:
    """A suite's own pytest on `tests`: quiet, listing failures, errors and skips, 60 s a test,
    no cache written into the checkout; `options` add the suite's own."""
    python = str(work / "venv" / "bin" / "python")
    return [
        python,
        "-m",
        "pytest",
        tests,
        "-q",
        "-rfEs",
        "--timeout",
        "60",
        "-p",
        "no:cacheprovider",
        *options,
    ]


def pika_command(work: Path, _: Path) -> list[str]:
    return _pytest(work, "tests", "-o", "addopts=")


def aio_command(not_run: list[str]) -> Callable[[Path, Path], list[str]]:
    def command(work: Path, _: Path) -> list[str]:
        ignored = [f"--ignore={path}" for path in not_run]
        return _pytest(work, "tests", "-p", "docker_stub", "-o", "log_cli=false", "-k", "not amqps", *ignored)

    return command


def py_amqp_command(work: Path, _: Path) -> list[str]:
    """py-amqp (kombu's and so Celery's transport): unit and integration tests, without the
    TLS parameters (no TLS listener; two of them also need a public host)."""
    return _pytest(work, "t", "-k", "not tls")


def amqplib_command(_: Path, __: Path) -> list[str]:
    return ["node", "--test", "--test-timeout=1000"]


def amqplib_env(_: Path, url: str) -> dict[str, str]:
    return {**os.environ, "URL": url}


def go_command(_: Path, source: Path) -> list[str]:
    # Go before 1.20 has no -skip: run every test but GO_NOT_RUN by name.
    listed = subprocess.run(
        ["go", "test", "-tags", "integration", "-list", ".*", "."],
        cwd=source,
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    names = [name for name in listed if name.startswith(("Test", "Example")) and name not in GO_NOT_RUN]
    pattern = "^(" + "|".join(names) + ")$"
    return ["go", "test", "-v", "-tags", "integration", "-timeout", "900s", "-run", pattern, "."]


def go_url_env(_: Path, url: str) -> dict[str, str]:
    return {**go_env(), "AMQP_URL": url}


def _number(pattern: str, text: str) -> int:
    found = re.findall(pattern, text, re.MULTILINE)
    return int(found[-1]) if found else 0


#: pytest's last line, "== 3 failed, 1142 passed, 59 skipped, 1 warning in 86.45s ==".
_PYTEST_SUMMARY = re.compile(r"^=*\s*(\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", re.MULTILINE)


def count_pytest(output: str) -> Counts:
    found = _PYTEST_SUMMARY.findall(output)
    summary = found[-1] if found else ""
    return Counts(
        passed=_number(r"(\d+) passed", summary),
        failed=_number(r"(\d+) failed", summary) + _number(r"(\d+) errors?", summary),
        skipped=_number(r"(\d+) skipped", summary),
        not_run=_number(r"(\d+) deselected", summary),
    )


def count_node(output: str) -> Counts:
    return Counts(
        passed=_number(r"^# pass (\d+)", output),
        failed=_number(r"^# fail (\d+)", output),
        skipped=_number(r"^# skipped (\d+)", output),
        cancelled=_number(r"^# cancelled (\d+)", output),
    )


def count_go(output: str) -> Counts:
    return Counts(
        passed=len(re.findall(r"^\s*--- PASS", output, re.MULTILINE)),
        failed=len(re.findall(r"^\s*--- FAIL", output, re.MULTILINE)),
        skipped=len(re.findall(r"^\s*--- SKIP", output, re.MULTILINE)),
        not_run=len(GO_NOT_RUN),
    )


SUITES = [
    Suite("pika", PIKA, fetch_pika, pika_command, python_env, count_pytest),
    Suite(
        "aio-pika",
        AIO_PIKA,
        lambda work: sdist(work, "aio-pika", AIO_PIKA),
        aio_command(AIO_PIKA_NOT_RUN),
        python_env,
        count_pytest,
    ),
    Suite(
        "aiormq",
        AIORMQ,
        lambda work: sdist(work, "aiormq", AIORMQ),
        aio_command([]),
        python_env,
        count_pytest,
    ),
    Suite(
        "py-amqp",
        PY_AMQP,
        lambda work: sdist(work, "amqp", PY_AMQP),
        py_amqp_command,
        python_env,
        count_pytest,
    ),
    Suite("amqplib", AMQPLIB, fetch_amqplib, amqplib_command, amqplib_env, count_node),
    Suite("amqp091-go", AMQP091_GO, fetch_go, go_command, go_url_env, count_go),
]
