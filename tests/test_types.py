"""The annotations are checked: mypy, as configured in pyproject.toml ([tool.mypy]), reports no
error in gateway/, federation/ or topology/ (strict on gateway.wire and gateway.routing).

mypy keeps its cache in the work tree's .mypy_cache, so a run after the first checks only what
changed (about a second)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: One reported problem: "path:line: error: text  [code]" (notes, which explain an error, are
#: kept in the printed output but not counted).
_ERROR = re.compile(r"^[^:\s]+\.py:\d+(?::\d+)?: error: ")


def test_mypy_reports_no_errors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    found = [line for line in result.stdout.splitlines() if _ERROR.match(line)]
    # Exit 1 means "errors found", so there must be some to read; 2 is a crash or a bad option.
    assert result.returncode == 0 or (result.returncode == 1 and found), f"mypy failed:\n{output}"
    assert not found, f"mypy reports {len(found)} error(s):\n{output}"
