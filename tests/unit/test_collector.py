"""The node's garbage collector policy: the survivors of a full collection (a message backlog)
are left out of later automatic collections, and the scheduled full collection still frees
cyclic garbage among them."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from gateway import collector
from gateway.broker.message import Message
from gateway.wire.content import Content


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def installed() -> Iterator[None]:
    thresholds = gc.get_threshold()
    collector.install()
    try:
        yield
    finally:
        gc.callbacks.remove(collector._freeze_survivors)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_a_backlog_that_survived_a_full_collection_is_not_walked_again(installed: None) -> None:
    gc.disable()  # an automatic full collection while it is built would freeze it already
    try:
        backlog = [Message(n, "", "q", Content(b"", b"x"), False, None, 0) for n in range(10_000)]
        assert any(o is backlog[0] for o in gc.get_objects())
    finally:
        gc.enable()
    gc.collect()  # as an automatic full collection would
    assert gc.get_freeze_count() >= len(backlog)
    walked = {id(o) for o in gc.get_objects()}
    assert not any(id(message) in walked for message in backlog)


def test_the_scheduled_full_collection_frees_frozen_cyclic_garbage(installed: None) -> None:
    cycle = Cycle()
    gone = weakref.ref(cycle)
    gc.collect()  # alive now: frozen with the other survivors
    del cycle
    gc.collect()
    assert gone() is not None  # garbage, but frozen
    collector.collect_everything()
    assert gone() is None


#: Builds a 200,000-message backlog in a node-sized process and prints the most objects any
#: automatic collection walked. A process of its own: when a full collection next runs depends
#: on how many objects the last one kept (Python runs one once a quarter as many again are
#: pending), so in the test runner's process, which holds every test module, it would measure
#: the runner, not the policy.
_BACKLOG = """
import gc
from gateway import collector
from gateway.broker.message import Message
from gateway.wire.content import Content

collector.install()
walked = []

def count(phase, info):
    if phase == "start":
        walked.append(sum(len(gc.get_objects(g)) for g in range(info["generation"] + 1)))

gc.collect()  # the process's own objects are frozen, as after a node's first full collection
gc.callbacks.insert(0, count)
backlog = [Message(n, "", "q", Content(b"", b"x"), False, None, 0) for n in range(200_000)]
gc.callbacks.remove(count)
assert len(backlog) == 200_000 and walked
print(max(walked))
"""


def test_no_automatic_collection_walks_a_growing_backlog_whole() -> None:
    """Every automatic collection holds the event loop for as long as it walks: while 200,000
    messages pile up, none walks more than a bounded number of objects (at (10000, 10, 10) a
    middle collection walked 110,000, a full one every message not yet frozen)."""
    result = subprocess.run(
        [sys.executable, "-c", _BACKLOG], capture_output=True, text=True, timeout=120, check=True
    )
    assert int(result.stdout) < 80_000
