"""The disk alarm against a fake free-space reading, and the store on a real full tmpfs."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.broker import Broker
from gateway.diskalarm import DiskAlarm
from gateway.store import Store, WriteFailed
from gateway.wire.content import Content
from tests.tmpfs import fill, small_tmpfs

from .broker_fakes import Client
from .test_store import PERSISTENT, add, queued_ids

BIG = Content.from_properties(PERSISTENT, b"x" * 65536)


class Disk:
    """A free-space reading the test sets."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: Path) -> int:
        return self.free


async def test_the_alarm_is_set_below_the_limit_and_cleared_at_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gateway.disk")
    broker = Broker()
    disk = Disk(2000)
    alarm = DiskAlarm(broker, Path("/data"), 1000, disk)
    alarm.check()
    assert broker.disk_hold is None
    disk.free = 999
    alarm.check()
    hold = broker.disk_hold
    assert hold is not None and hold.reason == "low on disk space: 999 bytes free, disk_free_limit is 1000"
    disk.free = 10
    alarm.check()
    assert broker.disk_hold is hold  # one alarm, one log line, until it clears
    publisher = Client(broker)
    hold.block(publisher.session)
    assert publisher.outbox.blocked == hold.reason
    disk.free = 1000
    alarm.check()
    assert broker.disk_hold is None
    assert publisher.outbox.blocked is None  # released
    assert [r.getMessage() for r in caplog.records] == [
        "disk alarm set: 999 bytes free on /data, under the disk_free_limit of 1000 bytes;"
        " holding publishers of persistent messages",
        "disk alarm cleared: 1000 bytes free on /data, disk_free_limit 1000 bytes; publishers resume",
    ]


def test_an_unreadable_disk_keeps_the_alarm_as_it_was(caplog: pytest.LogCaptureFixture) -> None:
    def broken(path: Path) -> int:
        raise OSError(5, "Input/output error")

    broker = Broker()
    DiskAlarm(broker, Path("/data"), 1000, broken).check()
    assert broker.disk_hold is None
    assert "cannot read the free space of /data" in caplog.text


def test_a_zero_limit_never_sets_the_alarm() -> None:
    broker = Broker()
    DiskAlarm(broker, Path("/data"), 0, Disk(0)).check()
    assert broker.disk_hold is None


async def test_the_store_survives_a_full_disk_and_goes_on_once_space_returns(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "4m") as disk, Store.open(disk / "data") as store:
        store.put_queue("/", "q", False, {})
        add(store, 1)
        assert await store.commit() == 1
        filler = fill(disk, 0)
        store.put_queue("/", "q2", False, {})
        for n in range(2, 12):  # 640 KiB: more than a full disk has room for
            store.add_message("/", "q", n, "", "k", BIG, 1.0)
        with pytest.raises(WriteFailed, match="ticket 2 is not durable: database or disk is full"):
            await store.commit()
        filler.unlink()
        add(store, 100, "q2")
        assert await store.commit() == 3
        assert [q.name for q in store.load().queues] == ["q", "q2"]
        assert queued_ids(store) == [1] and queued_ids(store, queue="q2") == [100]
        with sqlite3.connect(store.path) as probe:
            assert probe.execute("PRAGMA integrity_check").fetchone() == ("ok",)
