"""gateway.wire stays sans-I/O, and its package re-exports what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gateway.wire

ROOT = Path(__file__).resolve().parents[2]


def test_wire_never_imports_trio_or_asyncio() -> None:
    code = (
        "import sys, gateway.wire, gateway.wire.connection, gateway.wire.frames;"
        "print(sorted(m for m in ('trio', 'asyncio') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_exports() -> None:
    for name in gateway.wire.__all__:
        assert getattr(gateway.wire, name).__module__.startswith("gateway.wire"), name
