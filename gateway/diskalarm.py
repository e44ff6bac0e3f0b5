"""The disk alarm: publishers wait while the store's filesystem is short of space.

As RabbitMQ's `disk_free_limit`: a full disk must not cost the node (SQLite would fail every
commit, nacking every publish), so the node watches the free space of the filesystem that holds
its data dir, every CHECK_INTERVAL seconds, after each commit and after a failed one. Below the
limit it raises the broker's alarm (`Broker.disk_hold`): each connection that then publishes a
message the store has to write is held after that publish (Connection.Blocked with the reason;
the server stops reading from it), while consumers, acks and management go on, since they free
space or write next to nothing. When the free space is back at the limit the alarm clears and
every held connection gets Connection.Unblocked.

The limit is a floor, not a reservation: writes already accepted (one publish per connection,
the batch being committed) may still take the disk below it, and if they fill it, the store's
failed-write handling (gateway.store.database) nacks them and the node serves on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from gateway.broker.hold import Hold

if TYPE_CHECKING:
    from gateway.broker import Broker

LOGGER = logging.getLogger("gateway.disk")

#: RabbitMQ's default disk_free_limit.
DEFAULT_LIMIT = 50_000_000

#: Seconds between checks when nothing is committed (space freed by others is seen this late).
CHECK_INTERVAL = 1.0


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem holding `path`."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class DiskAlarm:
    """Sets and clears `broker.disk_hold` from the free space on `path`'s filesystem."""

    def __init__(
        self, broker: Broker, path: Path, limit: int, free: Callable[[Path], int] = free_bytes
    ) -> None:
        self.broker = broker
        self.path = path
        self.limit = limit
        self._free = free
        self._alarm: Hold | None = None
        #: Free bytes at the last reading.
        self.free = 0

    @property
    def on(self) -> bool:
        return self._alarm is not None

    def check(self) -> None:
        """Compare the free space with the limit now; raise or clear the alarm on a change."""
        try:
            self.free = free = self._free(self.path)
        except OSError as exc:
            LOGGER.error("cannot read the free space of %s: %s", self.path, exc)
            return
        if free < self.limit and self._alarm is None:
            self._alarm = Hold(f"low on disk space: {free} bytes free, disk_free_limit is {self.limit}")
            self.broker.disk_hold = self._alarm
            LOGGER.warning(
                "disk alarm set: %d bytes free on %s, under the disk_free_limit of %d bytes;"
                " holding publishers of persistent messages",
                free,
                self.path,
                self.limit,
            )
        elif free >= self.limit and self._alarm is not None:
            self.broker.disk_hold = None
            self._alarm.release()
            self._alarm = None
            LOGGER.info(
                "disk alarm cleared: %d bytes free on %s, disk_free_limit %d bytes; publishers resume",
                free,
                self.path,
                self.limit,
            )

    async def run(self) -> None:
        """Check every CHECK_INTERVAL seconds, until cancelled."""
        while True:
            self.check()
            await trio.sleep(CHECK_INTERVAL)
