"""A small tmpfs for tests of a full disk: mounted where the tests run as root, else skipped.

`fill` takes the free space down to what a test wants, with one file it can delete to give the
space back, so a test decides when the disk is full and when space returns.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.diskalarm import free_bytes

MOUNT_TIMEOUT = 30.0


@contextmanager
def small_tmpfs(directory: Path, size: str = "8m") -> Iterator[Path]:
    """Mount a tmpfs of `size` on `directory` for the block; always unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root; this test runs unprivileged")
    directory.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)]
    try:
        result = subprocess.run(mount, capture_output=True, text=True, timeout=MOUNT_TIMEOUT)
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs: {exc}")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {result.stderr.strip() or result.returncode}")
    try:
        yield directory
    finally:
        # Lazy: a node process killed by a failing test may still hold files open.
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=MOUNT_TIMEOUT)


def fill(directory: Path, leave: int) -> Path:
    """Allocate a file in `directory` so that about `leave` bytes stay free; delete it to free them."""
    filler = directory / f"filler-{len(list(directory.glob('filler-*')))}"
    take = free_bytes(directory) - leave
    with open(filler, "wb") as file:
        if take > 0:
            os.posix_fallocate(file.fileno(), 0, take)
    return filler
