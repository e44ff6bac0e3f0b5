"""Logins under load: a bound on concurrent password checks, and a throttle on failures.

A password check is scrypt: about 40 ms of CPU and 16 MiB of memory. Run in as many threads
as arrive (Trio's default allows 40), a storm of wrong-password logins held 40 checks of 16
MiB at once, that memory stayed with the allocator's per-thread arenas, and a legitimate login
queued behind the storm for longer than clients wait for a handshake. So:

- at most one check per CPU runs at a time (`Logins.checks`);
- credentials that succeeded recently skip the check and its queue (UsersDB's cache);
- after `max_failures` failures for one user name from one source address within `window`
  seconds, further attempts for that pair are refused at once, without a check, until the
  oldest of those failures is `window` seconds old. Checks still running count towards the
  limit, so a burst of concurrent attempts cannot queue more than `max_failures` checks.
  The throttle comes before the cache: a throttled guesser learns nothing, not even from a
  guess that happens to be a cached, correct password.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from gateway.security.passwords import return_check_memory_to_the_system
from gateway.security.sasl import EXTERNAL, AuthenticationFailed, external_login, login_request
from gateway.security.users import User, UsersDB

LOGGER = logging.getLogger("gateway.security")

MAX_FAILURES = 10
WINDOW = 60.0
#: (address, user) pairs tracked at most; idle ones are dropped first, then the oldest.
MAX_TRACKED = 10_000

Key = tuple[str, str]


@dataclass
class _Tally:
    failures: deque[float] = field(default_factory=deque)
    pending: int = 0
    refused: int = 0
    first_refused: float = 0.0


class LoginThrottle:
    """Failed logins per (source address, user name) in a sliding window; sans-I/O.

    `admit` before a password check, `settle` after it. Refusals are logged once per burst:
    a warning at the first, and their number at the pair's first attempt admitted again (or
    when the pair is forgotten).
    """

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window = window
        self._clock = clock
        self._tallies: dict[Key, _Tally] = {}

    def admit(self, key: Key) -> bool:
        """Count an attempt for `key` as pending; False, counting nothing, while it is throttled."""
        now = self._clock()
        tally = self._tallies.get(key)
        if tally is None:
            if len(self._tallies) >= MAX_TRACKED:
                self._prune(now)
            tally = self._tallies[key] = _Tally()
        self._expire(key, tally, now)
        if len(tally.failures) + tally.pending >= self.max_failures:
            if not tally.refused:
                tally.first_refused = now
                host, user = key
                LOGGER.warning(
                    "login throttled: user %r from %s has %d failed logins within %gs and %d "
                    "checks running (limit %d); refusing further attempts without checking them",
                    user,
                    host,
                    len(tally.failures),
                    self.window,
                    tally.pending,
                    self.max_failures,
                )
            tally.refused += 1
            return False
        tally.pending += 1
        return True

    def settle(self, key: Key, failed: bool | None) -> None:
        """An admitted attempt ended: failed, succeeded (which forgives earlier failures), or
        None when it was abandoned before the check had a result."""
        tally = self._tallies.get(key)
        if tally is None:  # dropped by _prune while the check ran
            return
        tally.pending -= 1
        if failed:
            tally.failures.append(self._clock())
        elif failed is not None:
            tally.failures.clear()

    def _expire(self, key: Key, tally: _Tally, now: float) -> None:
        failures = tally.failures
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if tally.refused and len(failures) + tally.pending < self.max_failures:
            host, user = key
            LOGGER.warning(
                "login throttle lifted for user %r from %s: %d attempts refused over %.1fs",
                user,
                host,
                tally.refused,
                now - tally.first_refused,
            )
            tally.refused = 0

    def _prune(self, now: float) -> None:
        for key, tally in list(self._tallies.items()):
            self._expire(key, tally, now)
            if not tally.failures and not tally.pending:
                del self._tallies[key]
        while len(self._tallies) >= MAX_TRACKED:
            del self._tallies[next(iter(self._tallies))]


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Logins:
    """How a node checks Start-Ok credentials: throttle, cache, then a bounded password check."""

    def __init__(
        self, users: UsersDB, throttle: LoginThrottle | None = None, checks: int | None = None
    ) -> None:
        self.users = users
        self.throttle = throttle or LoginThrottle()
        #: Password checks running at once: one per CPU (each holds 16 MiB while it runs).
        self.checks = trio.CapacityLimiter(checks or _cpus())
        return_check_memory_to_the_system()

    async def authenticate(
        self, mechanism: str, response: bytes, peer_host: str, tls_login: str | None = None
    ) -> User:
        """The user these credentials prove, or AuthenticationFailed to send and log.
        EXTERNAL checks no password: the TLS handshake verified the certificate naming
        `tls_login`, so neither the throttle nor the password checks apply to it."""
        if mechanism == EXTERNAL:
            return external_login(self.users, response, tls_login, peer_host)
        request = login_request(self.users, mechanism, response, peer_host)
        key = (peer_host, request.username)
        if not self.throttle.admit(key):
            raise AuthenticationFailed(
                "ACCESS_REFUSED - too many failed logins as this user from this address; "
                f"try again in {self.throttle.window:g} seconds",
                f"user {request.username!r} - throttled after repeated failed logins",
                logged=True,
            )
        failed: bool | None = None
        try:
            verified = self.users.recently_verified(request.username, request.password)
            if not verified:
                verified = await trio.to_thread.run_sync(
                    self.users.verify, request.username, request.password, limiter=self.checks
                )
            failed = request.user is None or not verified
        finally:
            self.throttle.settle(key, failed)
        if request.user is None or failed:
            raise request.refused()
        return request.user
