"""The login throttle (per source address and user) and the bound on concurrent password checks."""

from __future__ import annotations

import logging

import pytest
import trio

from gateway.security import AuthenticationFailed, Logins, LoginThrottle, UsersDB

KEY = ("10.0.0.9", "alice")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(throttle: LoginThrottle, key: tuple[str, str] = KEY, times: int = 1) -> None:
    for _ in range(times):
        assert throttle.admit(key)
        throttle.settle(key, failed=True)


def test_failures_within_the_window_throttle_that_address_and_user_only() -> None:
    clock = Clock()
    throttle = LoginThrottle(max_failures=3, window=60, clock=clock)
    fail(throttle, times=3)
    assert not throttle.admit(KEY)
    assert throttle.admit(("10.0.0.8", "alice"))  # another address
    assert throttle.admit(("10.0.0.9", "bob"))  # another user
    clock.now += 59
    assert not throttle.admit(KEY)
    clock.now += 1  # the oldest failure is a window old
    assert throttle.admit(KEY)


def test_checks_still_running_count_so_a_burst_cannot_queue_more() -> None:
    throttle = LoginThrottle(max_failures=3, clock=Clock())
    assert [throttle.admit(KEY) for _ in range(5)] == [True, True, True, False, False]
    throttle.settle(KEY, failed=None)  # abandoned: neither a failure nor a success
    assert throttle.admit(KEY)


def test_a_success_forgives_earlier_failures() -> None:
    throttle = LoginThrottle(max_failures=3, clock=Clock())
    fail(throttle, times=2)
    assert throttle.admit(KEY)
    throttle.settle(KEY, failed=False)
    fail(throttle, times=2)
    assert throttle.admit(KEY)


def test_refusals_are_logged_once_per_burst_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttle = LoginThrottle(max_failures=2, window=10, clock=clock)
    fail(throttle, times=2)
    with caplog.at_level(logging.WARNING, logger="gateway.security"):
        for _ in range(100):
            assert not throttle.admit(KEY)
        clock.now += 10
        assert throttle.admit(KEY)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "login throttled: user 'alice' from 10.0.0.9 has 2 failed logins within 10s and 0 checks "
        "running (limit 2); refusing further attempts without checking them",
        "login throttle lifted for user 'alice' from 10.0.0.9: 100 attempts refused over 10.0s",
    ]


def test_tracked_pairs_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.security.logins.MAX_TRACKED", 10)
    throttle = LoginThrottle(max_failures=1, clock=Clock())
    for number in range(25):
        fail(throttle, (f"10.0.0.{number}", "x"))
    assert len(throttle._tallies) <= 10


@pytest.fixture(scope="module")
def users() -> UsersDB:
    return UsersDB.default()


def plain(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


async def test_a_cached_login_skips_the_queue_of_password_checks(users: UsersDB) -> None:
    logins = Logins(users, checks=1)
    assert (await logins.authenticate("PLAIN", plain("guest", "guest"), "127.0.0.1")).name == "guest"
    async with logins.checks:  # every check slot busy, as in a storm
        with trio.fail_after(5):
            user = await logins.authenticate("PLAIN", plain("guest", "guest"), "127.0.0.1")
    assert user.name == "guest"


async def test_throttled_attempts_are_refused_without_a_password_check(users: UsersDB) -> None:
    logins = Logins(users, LoginThrottle(max_failures=2), checks=1)
    for _ in range(2):
        with pytest.raises(AuthenticationFailed) as refused:
            await logins.authenticate("PLAIN", plain("guest", "wrong"), "127.0.0.1")
        assert not refused.value.logged
    async with logins.checks:  # a check would wait for this forever
        with trio.fail_after(5), pytest.raises(AuthenticationFailed) as refused:
            await logins.authenticate("PLAIN", plain("guest", "guest"), "127.0.0.1")
    assert refused.value.reply_code == 403 and refused.value.logged
    assert "too many failed logins" in refused.value.reply_text
    # Another source address is not affected.
    assert (await logins.authenticate("PLAIN", plain("guest", "guest"), "127.0.0.2")).name == "guest"
