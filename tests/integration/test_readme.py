"""The README's pika example runs as written against a real node (only the port differs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.nodes import NodeProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def pika_example() -> str:
    section = README.read_text().split("## Connect with pika", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README lost its pika example"
    return match.group(1)


def test_readme_pika_example_runs(shared_node: NodeProcess) -> None:
    code = pika_example()
    assert "localhost:5672" in code
    code = code.replace("localhost:5672", f"127.0.0.1:{shared_node.port}")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "b'hi'"
