"""Password hashes: salted scrypt, self-describing, constant-time checked; the login cache."""

from __future__ import annotations

import pytest

from gateway.security.passwords import (
    MAX_MEMORY,
    PasswordHash,
    VerifiedCache,
    hash_password,
)

HASHED = hash_password("s3cret")


def test_hash_is_self_describing_and_verifies() -> None:
    assert HASHED.startswith("scrypt$n=16384,r=8,p=1$")
    stored = PasswordHash.parse(HASHED)
    assert stored.encode() == HASHED
    assert len(stored.salt) == 16 and len(stored.key) == 32
    assert stored.verify("s3cret")
    assert not stored.verify("s3cret ")
    assert not stored.verify("")


def test_salts_differ_so_equal_passwords_hash_differently() -> None:
    again = PasswordHash.parse(hash_password("s3cret"))
    assert again.salt != PasswordHash.parse(HASHED).salt
    assert again.encode() != HASHED
    assert again.verify("s3cret")


def test_non_ascii_password() -> None:
    assert PasswordHash.create("pässwörd✓").verify("pässwörd✓")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s3cret", "expected scrypt$<parameters>$<salt>$<hash>"),
        ("bcrypt$a$b$c", "expected scrypt$<parameters>$<salt>$<hash>"),
        ("scrypt$n=16384,r=8$AAAAAAAAAAA=$" + "A" * 44, "parameters n, r and p are all required"),
        ("scrypt$n=16384,r=8,p=1,q=2$x$y", "bad parameter 'q=2' (expected n=..,r=..,p=..)"),
        ("scrypt$n=-1,r=8,p=1$x$y", "bad parameter 'n=-1' (expected n=..,r=..,p=..)"),
        ("scrypt$n=1000,r=8,p=1$x$y", "unusable scrypt parameters n=1000, r=8, p=1"),
        ("scrypt$n=1048576,r=8,p=1$x$y", "unusable scrypt parameters n=1048576, r=8, p=1"),
        ("scrypt$n=16384,r=8,p=1$not base64!$AAAA", "salt and hash must be base64"),
        ("scrypt$n=16384,r=8,p=1$AAAA$AAAA", "salt or hash too short"),
    ],
)
def test_parse_rejects_malformed_hashes(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        PasswordHash.parse(text)
    assert str(caught.value) == message


def test_memory_cap_allows_the_defaults_with_room_to_grow() -> None:
    assert 128 * 8 * 2**17 < MAX_MEMORY


def test_cache_tokens_depend_on_user_password_and_stored_hash() -> None:
    cache = VerifiedCache(size=2)
    stored = PasswordHash.parse(HASHED)
    token = cache.token("alice", "s3cret", stored)
    assert token not in cache
    cache.add(token)
    assert token in cache
    assert b"s3cret" not in token
    assert cache.token("alice", "s3cret", stored) == token
    assert cache.token("bob", "s3cret", stored) != token
    assert cache.token("alice", "other", stored) != token
    assert cache.token("alice", "s3cret", PasswordHash.create("s3cret")) != token
    # The user/password boundary is unambiguous.
    assert cache.token("a\0b", "c", stored) != cache.token("a", "b\0c", stored)


def test_cache_is_bounded_and_keeps_the_most_recently_used() -> None:
    cache = VerifiedCache(size=2)
    stored = PasswordHash.parse(HASHED)
    first, second, third = (cache.token(name, "pw", stored) for name in ("a", "b", "c"))
    cache.add(first)
    cache.add(second)
    assert first in cache  # touched: now the newest
    cache.add(third)
    assert first in cache and third in cache
    assert second not in cache


def test_cache_keys_differ_between_processes_or_instances() -> None:
    stored = PasswordHash.parse(HASHED)
    assert VerifiedCache().token("a", "b", stored) != VerifiedCache().token("a", "b", stored)
