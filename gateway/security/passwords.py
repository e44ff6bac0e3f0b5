"""Salted password hashes (scrypt) and a cache of recent successful checks.

Parameters: scrypt with n=2**14, r=8, p=1 (16 MiB of memory, about 40 ms of one core here).
That is the cost an attacker pays per guess for each user, since every user has their own
16-byte random salt, and it is memory-hard, so GPUs gain little. It is also the cost of each
login that misses the cache, which keeps a reconnect storm affordable and one check well
under 100 ms. Hashes are self-describing ("scrypt$n=16384,r=8,p=1$<salt>$<hash>", base64),
so the parameters can be raised later without breaking stored hashes.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

SCHEME = "scrypt"
N, R, P = 2**14, 8, 1
SALT_BYTES = 16
HASH_BYTES = 32

#: Refuse hashes whose parameters would need more memory than this to check: a hand-edited
#: users file must not be able to exhaust the node's memory at the first login.
MAX_MEMORY = 256 * 2**20

#: glibc's mallopt parameter, and the size from which allocations get mappings of their own.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 4 * 2**20


@dataclass(frozen=True)
class PasswordHash:
    """One stored password: scrypt parameters, salt and derived key."""

    n: int
    r: int
    p: int
    salt: bytes
    key: bytes

    @classmethod
    def create(cls, password: str) -> PasswordHash:
        """Hash a new password with a fresh random salt."""
        salt = os.urandom(SALT_BYTES)
        return cls(N, R, P, salt, _scrypt(password, salt, N, R, P, HASH_BYTES))

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """Decode "scrypt$n=..,r=..,p=..$salt$key"; ValueError says what is wrong."""
        fields = text.split("$")
        if len(fields) != 4 or fields[0] != SCHEME:
            raise ValueError(f"expected {SCHEME}$<parameters>$<salt>$<hash>")
        params: dict[str, int] = {}
        for item in fields[1].split(","):
            name, _, number = item.partition("=")
            if name not in ("n", "r", "p") or name in params or not number.isdigit():
                raise ValueError(f"bad parameter {item!r} (expected n=..,r=..,p=..)")
            params[name] = int(number)
        if len(params) != 3:
            raise ValueError("parameters n, r and p are all required")
        n, r, p = params["n"], params["r"], params["p"]
        if n < 2 or n & (n - 1) or r < 1 or p < 1 or _memory(n, r, p) > MAX_MEMORY:
            raise ValueError(f"unusable scrypt parameters n={n}, r={r}, p={p}")
        try:
            salt = base64.b64decode(fields[2], validate=True)
            key = base64.b64decode(fields[3], validate=True)
        except binascii.Error:
            raise ValueError("salt and hash must be base64") from None
        if len(salt) < 8 or len(key) < 16:
            raise ValueError("salt or hash too short")
        return cls(n, r, p, salt, key)

    def encode(self) -> str:
        salt = base64.b64encode(self.salt).decode("ascii")
        key = base64.b64encode(self.key).decode("ascii")
        return f"{SCHEME}$n={self.n},r={self.r},p={self.p}${salt}${key}"

    def verify(self, password: str) -> bool:
        """Recompute and compare in constant time."""
        candidate = _scrypt(password, self.salt, self.n, self.r, self.p, len(self.key))
        return hmac.compare_digest(candidate, self.key)


def return_check_memory_to_the_system() -> None:
    """Make each check's 16 MiB go back to the system when the check ends (glibc only).

    glibc serves a large allocation with a mapping of its own, unmapped when freed, but after
    the first such free it raises its threshold to that size: later checks then take their
    16 MiB from per-thread heaps, which keep it. Under a storm of logins that was about 16 MiB
    per worker thread, held for good. A fixed threshold turns that adjustment off.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (or no C library to ask)
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def hash_password(password: str) -> str:
    """The string to store in a users file for `password`."""
    return PasswordHash.create(password).encode()


def _memory(n: int, r: int, p: int) -> int:
    """Bytes OpenSSL allocates for these parameters (its own formula, plus a little)."""
    return 128 * r * (n + p + 2) + 4096


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=_memory(n, r, p),
        dklen=length,
    )


class VerifiedCache:
    """Remembers recent successful (user, password) checks so reconnects skip scrypt.

    Clients such as Celery workers and connection pools reconnect with the same credentials
    all day; paying 40 ms of CPU each time buys no security. Entries are HMAC-SHA256 digests
    under a random key that lives only in this process, so nothing here reaches disk and a
    digest reveals nothing without the key. Someone who can read the node's memory could
    brute-force cached passwords quickly, but such a reader also sees live connections'
    credentials in the clear, so the cache adds no real exposure. Only successes are cached,
    so failed guesses always pay full price. Thread-safe: the server may verify in threads.
    """

    def __init__(self, size: int = 1024) -> None:
        self._key = os.urandom(32)
        self._size = size
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def token(self, username: str, password: str, stored: PasswordHash) -> bytes:
        """Digest of the credentials and the stored hash (a password change misses)."""
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (username.encode(), password.encode(), stored.key):
            mac.update(len(part).to_bytes(4, "big") + part)  # length-prefixed: unambiguous
        return mac.digest()

    def __contains__(self, token: bytes) -> bool:
        with self._lock:
            if token not in self._seen:
                return False
            self._seen.move_to_end(token)
            return True

    def add(self, token: bytes) -> None:
        with self._lock:
            self._seen[token] = None
            self._seen.move_to_end(token)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
