"""Return ids across federation levels: stamped on the way up, taken out on the way down, and
how long a publish stays claimable."""

from __future__ import annotations

from pamqp import commands

from federation import returns
from federation.returns import RETURN_HEADER, RETURN_WINDOW, PendingReturns, take_return_id, with_return_id
from gateway.wire import Content


def test_each_level_takes_its_own_id_and_the_publisher_gets_its_message_back() -> None:
    original = Content.from_properties(commands.Basic.Properties(content_type="text/plain"), b"body")
    up_one = with_return_id(original, "leaf", 7)
    up_two = with_return_id(up_one, "mid", 3)
    assert up_two.headers == {RETURN_HEADER: {"leaf": 7, "mid": 3}}
    mid_id, down_one = take_return_id(up_two, "mid")
    leaf_id, down_two = take_return_id(down_one, "leaf")
    assert (mid_id, leaf_id) == (3, 7)
    assert down_two.headers is None and down_two.properties == original.properties
    assert down_two.body == b"body"


def test_the_publishers_own_headers_are_kept() -> None:
    original = Content.from_properties(commands.Basic.Properties(headers={"app": "x"}), b"")
    return_id, back = take_return_id(with_return_id(original, "leaf", 1), "leaf")
    assert (return_id, back.headers) == (1, {"app": "x"})


def test_a_message_without_our_id_is_left_alone() -> None:
    content = with_return_id(Content.from_properties(None, b""), "other", 1)
    assert take_return_id(content, "leaf") == (None, content)
    plain = Content.from_properties(None, b"")
    assert take_return_id(plain, "leaf") == (None, plain)


def test_a_publish_is_claimable_once_within_the_window() -> None:
    now = [100.0]
    pending = PendingReturns(lambda: now[0])
    first = pending.add((1, 1))
    second = pending.add((2, 1))
    assert pending.take(second) == (2, 1)
    assert pending.take(second) is None
    now[0] += RETURN_WINDOW + 1
    third = pending.add((3, 1))  # adding forgets what is older than the window
    assert pending.take(first) is None
    assert pending.take(third) == (3, 1)
    assert pending.take(None) is None and len(pending) == 0


def test_ids_do_not_repeat_across_restarts() -> None:
    before, after = PendingReturns(lambda: 0.0), PendingReturns(lambda: 0.0)
    assert before.add((1, 1)) != after.add((1, 1))


def test_at_most_max_pending_are_kept(monkeypatch) -> None:
    monkeypatch.setattr(returns, "MAX_PENDING", 3)
    pending = PendingReturns(lambda: 0.0)
    ids = [pending.add((n, 1)) for n in range(5)]
    assert len(pending) == 3
    assert [pending.take(i) for i in ids] == [None, None, (2, 1), (3, 1), (4, 1)]
