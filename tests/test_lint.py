"""Style is part of the build: ruff's lint rules and formatter, as configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["gateway", "federation", "topology", "spark", "tests", "benchmarks"]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, *SOURCES], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_ruff_lint_is_clean() -> None:
    result = ruff("check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
