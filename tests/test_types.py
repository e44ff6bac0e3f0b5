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

#: Files being reworked elsewhere right now (the pump and the federation client, issue 12): their
#: own errors are left out until that work lands. Errors they cause in other files still count.
PENDING = ["gateway/server.py", "federation/client.py"]

#: One reported problem: "path:line: error: text  [code]" (notes, which explain an error, are
#: kept in the printed output but not counted).
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ")


def test_mypy_reports_no_errors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    found = [(match["path"], line) for line in result.stdout.splitlines() if (match := _ERROR.match(line))]
    # Exit 1 means "errors found", so there must be some to read; 2 is a crash or a bad option.
    assert result.returncode == 0 or (result.returncode == 1 and found), f"mypy failed:\n{output}"
    errors = [line for path, line in found if path not in PENDING]
    assert not errors, f"mypy reports {len(errors)} error(s) outside PENDING {PENDING}:\n{output}"
