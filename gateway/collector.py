"""When the node's cyclic garbage collector looks at what: young objects often, the message
backlog on a timer.

Every queued message is a few small objects that live until consumed and are freed by their
reference counts, never by the cyclic collector. CPython's collector still walks all of them in
each full collection, which it starts whenever the objects surviving into the oldest generation
have grown by a quarter: with 200,000 queued messages one such walk held the event loop for
over 100 ms, at a random moment (a drain, a requeue), and every publisher's confirm waited for
it. So the survivors of each full collection are frozen (gc.freeze: left out of later
collections), and later automatic full collections only walk what was made since. A frozen
object that becomes cyclic garbage (a closed connection's objects) waits for the next scheduled
full collection: every FULL_COLLECTION_INTERVAL the node thaws everything and collects it all
once, a pause it chooses rather than one a load picks.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

import trio

LOGGER = logging.getLogger(__name__)

#: Generation thresholds. A collection walks its whole generation while the event loop waits:
#: at (10000, 10, 10) a middle one walked up to 110,000 objects (20-30 ms) and a full one
#: every unfrozen object (110 ms after a fill of 200,000 messages). At (5000, 4, 1) the young
#: generations stay under 5,000 and 25,000 objects, and a full collection is considered after
#: every middle one, so that with the freezing above it walks only what survived since the
#: last: every collection in `benchmarks backlog` took under 20 ms. An object that lives on is
#: still walked once per generation, so the total work stays the same.
GC_THRESHOLDS = (5_000, 4, 1)
#: Seconds between the full collections that also look at frozen objects.
FULL_COLLECTION_INTERVAL = 600.0
#: A full collection that took longer than this is logged (seconds).
SLOW_COLLECTION = 0.05


def install() -> None:
    """Set the thresholds and freeze the survivors of every full collection (process-wide:
    for `amq-gateway serve`, not for a node embedded in tests)."""
    gc.set_threshold(*GC_THRESHOLDS)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def collect_everything() -> float:
    """Thaw every frozen object and run one full collection (whose survivors are frozen
    again); returns how long it took, in seconds."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    return time.perf_counter() - started


async def run(interval: float = FULL_COLLECTION_INTERVAL) -> None:
    """The scheduled full collections, for the node's lifetime."""
    while True:
        await trio.sleep(interval)
        took = collect_everything()
        if took > SLOW_COLLECTION:
            LOGGER.info(
                "full garbage collection: %.0f ms, %d objects kept", took * 1000, gc.get_freeze_count()
            )
