"""gateway.store's checkpoints run beside the commits (issue 11, point 3): committed pages reach
the database file without waiting for a commit to copy them, the WAL still restarts from its
beginning under a steady stream of commits, and a failing checkpoint is logged and retried."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from gateway.store import Store, opening
from gateway.wire.content import Content

BODY = b"x" * 16_000  # about four pages


def add_large(store: Store, message_id: int) -> None:
    content = Content.from_properties(None, BODY)
    store.add_message("/", "q", message_id, "", "q", content, 1.0)


def wal(store: Store) -> Path:
    return store.path.with_name(store.path.name + "-wal")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "data") as opened:
        yield opened


async def wait_for(condition: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not condition():
            await trio.sleep(0.01)


async def test_committed_pages_reach_the_database_file_beside_the_commits(store: Store) -> None:
    """A few dozen pages, far under the committer's own automatic checkpoint: before the
    checkpointer, they stayed in the WAL."""
    empty = store.path.stat().st_size
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run_checkpoints)
        for message_id in range(1, 21):
            add_large(store, message_id)
            await store.commit()
        await wait_for(lambda: store.path.stat().st_size > empty + 20 * len(BODY))
        nursery.cancel_scope.cancel()


async def test_the_wal_restarts_under_a_steady_stream_of_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten times the automatic checkpoint's threshold, written one small commit after another
    while the checkpointer copies pages beside them: the WAL stays near that threshold."""
    threshold = 100
    monkeypatch.setattr(opening, "WAL_AUTOCHECKPOINT_PAGES", threshold)
    with Store.open(tmp_path / "data") as store:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run_checkpoints)
            for message_id in range(1, 10 * threshold // 4 + 1):
                add_large(store, message_id)
                await store.commit()
            nursery.cancel_scope.cancel()
        written = 10 * threshold * store._page_size
        assert wal(store).stat().st_size < written / 3


async def test_a_failing_checkpoint_is_logged_once_and_retried(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = store._checkpoint
    failures = 3

    def flaky() -> int:
        nonlocal failures
        if failures:
            failures -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return real()

    monkeypatch.setattr(store, "_checkpoint", flaky)
    caplog.set_level(logging.INFO, logger="gateway.store.database")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run_checkpoints)
        message_id = 0
        while not any("succeed again" in record.message for record in caplog.records):
            message_id += 1
            add_large(store, message_id)
            await store.commit()
            await trio.sleep(store.CHECKPOINT_INTERVAL)
            assert message_id < 100, "the checkpoint was never retried"
        nursery.cancel_scope.cancel()
    warnings = [record.message for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "database or disk is full" in warnings[0]
    assert failures == 0


def free_page_bytes(store: Store) -> int:
    with sqlite3.connect(store.path) as reader:
        (pages,) = reader.execute("PRAGMA freelist_count").fetchone()
    return int(pages) * store._page_size


async def test_a_checkpointed_wal_counts_as_reusable_space(store: Store) -> None:
    """Once every page in the WAL has reached the database, the next commit writes the WAL from
    its beginning: the disk alarm counts the file as free space, as it counts free pages. When
    the checkpointer lagged behind a burst, draining the queues that filled a small disk did
    not clear the alarm: the WAL held as many bytes as the messages (test_disk_full)."""
    store.put_queue("/", "q", False, {})
    for message_id in range(1, 21):
        add_large(store, message_id)
        await store.commit()
    for message_id in range(1, 21):
        store.remove_message("/", "q", message_id)
    await store.commit()
    assert store.reusable_bytes == free_page_bytes(store), "nothing checkpointed: the WAL is live"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run_checkpoints)
        await wait_for(lambda: store.reusable_bytes >= free_page_bytes(store) + wal(store).stat().st_size)
        nursery.cancel_scope.cancel()
    add_large(store, 21)
    await store.commit()
    assert store.reusable_bytes == free_page_bytes(store), "the commit wrote the WAL from its start"
