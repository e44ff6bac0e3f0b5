"""The node's garbage collector policy: the survivors of a full collection (a message backlog)
are left out of later automatic collections, and the scheduled full collection still frees
cyclic garbage among them."""

from __future__ import annotations

import gc
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
    backlog = [Message(n, "", "q", Content(b"", b"x"), False, None, 0) for n in range(10_000)]
    assert any(o is backlog[0] for o in gc.get_objects())
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
