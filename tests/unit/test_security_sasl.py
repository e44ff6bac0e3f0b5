"""SASL PLAIN and AMQPLAIN with the exact bytes real clients send, and RabbitMQ's replies."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import amqp.sasl
import pika.credentials
import pika.spec
import pytest
from aiormq.auth import PlainAuth
from pamqp import encode
from yarl import URL

from gateway.security import (
    AuthenticationFailed,
    User,
    UsersDB,
    authenticate,
    set_password,
)
from gateway.security.sasl import external_login

MALFORMED_PLAIN = "malformed PLAIN response (expected authzid NUL user NUL password)"


def refused(mechanism: str) -> str:
    return (
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> UsersDB:
    path = tmp_path_factory.mktemp("sasl") / "users.toml"
    set_password(path, "alice", "wonder land", ["/"])
    set_password(path, "ünï", "pässwörd")
    return UsersDB.load(path)


@pytest.fixture(scope="module")
def default_db() -> UsersDB:
    return UsersDB.default()


def pika_plain(user: str, password: str) -> bytes:
    start = pika.spec.Connection.Start(mechanisms=b"PLAIN AMQPLAIN")
    mechanism, response = pika.credentials.PlainCredentials(user, password).response_for(start)
    assert mechanism == "PLAIN"
    return response  # type: ignore[return-value]


def aiormq_plain(user: str, password: str) -> bytes:
    url = URL.build(scheme="amqp", user=user, password=password, host="h")
    connector = SimpleNamespace(url=url)
    return PlainAuth(connector).marshal().encode("utf-8")  # type: ignore[arg-type]


def authenticate_error(db: UsersDB, mechanism: str, response: bytes, host: str = "127.0.0.1"):
    with pytest.raises(AuthenticationFailed) as caught:
        authenticate(db, mechanism, response, host)
    return caught.value


# --- happy paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "build"),
    [
        ("PLAIN", pika_plain),
        ("PLAIN", lambda u, p: amqp.sasl.PLAIN(u, p).start(None)),
        ("PLAIN", aiormq_plain),
        ("PLAIN", lambda u, p: f"{u}\0{u}\0{p}".encode()),  # authzid = authcid is allowed
        ("AMQPLAIN", lambda u, p: amqp.sasl.AMQPLAIN(u, p).start(None)),  # kombu's bytes
        ("AMQPLAIN", lambda u, p: encode.field_table({"LOGIN": u, "PASSWORD": p})),  # with length
    ],
)
def test_real_clients_log_in(db: UsersDB, mechanism: str, build) -> None:
    user = authenticate(db, mechanism, build("alice", "wonder land"), "10.0.0.1")
    assert user == User("alice", frozenset({"/"}))
    assert authenticate(db, mechanism, build("ünï", "pässwörd"), "::1").name == "ünï"


def test_py_amqp_amqplain_bytes_are_a_table_without_length() -> None:
    response = amqp.sasl.AMQPLAIN("alice", "pw").start(None)
    assert response == b"\x05LOGINS\x00\x00\x00\x05alice\x08PASSWORDS\x00\x00\x00\x02pw"


def field(key: bytes, kind: bytes, payload: bytes) -> bytes:
    """One field-table entry with a length-prefixed value, built by hand."""
    return bytes([len(key)]) + key + kind + len(payload).to_bytes(4, "big") + payload


def test_amqplain_with_byte_array_values(db: UsersDB) -> None:
    # A client may send LOGIN/PASSWORD as byte arrays ('x') rather than long strings ('S').
    response = field(b"LOGIN", b"x", b"alice") + field(b"PASSWORD", b"x", b"wonder land")
    assert authenticate(db, "AMQPLAIN", response, "::1").name == "alice"


# --- guest and loopback ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"])
def test_guest_from_loopback(default_db: UsersDB, host: str) -> None:
    assert authenticate(default_db, "PLAIN", pika_plain("guest", "guest"), host).name == "guest"


@pytest.mark.parametrize("host", ["10.0.0.1", "::ffff:10.0.0.1", "2001:db8::5"])
def test_guest_refused_from_elsewhere(default_db: UsersDB, host: str) -> None:
    error = authenticate_error(default_db, "PLAIN", pika_plain("guest", "guest"), host)
    assert error.reply_code == 403
    assert error.reply_text == refused("PLAIN") == str(error)
    assert error.reason == "user 'guest' can only connect via localhost"
    error = authenticate_error(default_db, "AMQPLAIN", amqp.sasl.AMQPLAIN("guest", "guest").start(None), host)
    assert error.reply_text == refused("AMQPLAIN")
    assert error.reason == "user 'guest' can only connect via localhost"


def test_guest_from_a_users_file_is_still_loopback_only(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    set_password(path, "guest", "better")
    db = UsersDB.load(path)
    assert authenticate(db, "PLAIN", b"\0guest\0better", "127.0.0.1").name == "guest"
    error = authenticate_error(db, "PLAIN", b"\0guest\0better", "10.0.0.1")
    assert error.reason == "user 'guest' can only connect via localhost"
    error = authenticate_error(db, "PLAIN", b"\0guest\0guest", "127.0.0.1")
    assert error.reason == "user 'guest' - invalid credentials (wrong password)"


def test_no_default_guest_when_a_users_file_is_used(db: UsersDB) -> None:
    error = authenticate_error(db, "PLAIN", pika_plain("guest", "guest"))
    assert error.reason == "user 'guest' - invalid credentials (no such user)"


# --- unhappy paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (pika_plain("alice", "wrong"), "user 'alice' - invalid credentials (wrong password)"),
        (pika_plain("nobody", "x"), "user 'nobody' - invalid credentials (no such user)"),
        (pika_plain("alice", ""), "user 'alice' attempted to log in with a blank password"),
        (b"alice\0wonder land", MALFORMED_PLAIN),
        (b"\0alice\0wonder\0land", MALFORMED_PLAIN),
        (b"", MALFORMED_PLAIN),
        (b"\0\0wonder land", "PLAIN response has an empty user name"),
        (b"\0alice\0\xff", "PLAIN response is not UTF-8"),
        (b"bob\0alice\0wonder land", "user 'alice' may not act as 'bob'"),
    ],
)
def test_plain_refusals(db: UsersDB, response: bytes, reason: str) -> None:
    error = authenticate_error(db, "PLAIN", response)
    assert (error.reply_code, error.reply_text, error.reason) == (403, refused("PLAIN"), reason)


def amqplain(fields: dict) -> bytes:
    return encode.field_table(fields)[4:]


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (
            amqplain({"LOGIN": "alice", "PASSWORD": "nope"}),
            "user 'alice' - invalid credentials (wrong password)",
        ),
        (amqplain({"LOGIN": "alice"}), "AMQPLAIN response has no PASSWORD string"),
        (amqplain({"PASSWORD": "x"}), "AMQPLAIN response has no LOGIN string"),
        (amqplain({"LOGIN": 5, "PASSWORD": "x"}), "AMQPLAIN response has no LOGIN string"),
        (amqplain({"LOGIN": "", "PASSWORD": "x"}), "AMQPLAIN response has an empty LOGIN"),
        (field(b"LOGIN", b"S", b"\xff") + field(b"PASSWORD", b"S", b"x"), "AMQPLAIN LOGIN is not UTF-8"),
        (
            field(b"LOGIN", b"S", b"alice") + field(b"PASSWORD", b"x", b"\xff"),
            "AMQPLAIN PASSWORD is not UTF-8",
        ),
        (b"\0alice\0wonder land", "malformed AMQPLAIN response (not a field table)"),
        (
            amqplain({"LOGIN": "alice", "PASSWORD": "wonder land"})[:20],  # cut in a key
            "malformed AMQPLAIN response (not a field table)",
        ),
        (b"", "AMQPLAIN response has no LOGIN string"),
    ],
)
def test_amqplain_refusals(db: UsersDB, response: bytes, reason: str) -> None:
    error = authenticate_error(db, "AMQPLAIN", response)
    assert (error.reply_code, error.reply_text, error.reason) == (403, refused("AMQPLAIN"), reason)


def test_unknown_mechanism_is_command_invalid(db: UsersDB) -> None:
    error = authenticate_error(db, "EXTERNAL", b"")
    assert error.reply_code == 503
    assert error.reply_text == "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"
    assert error.reason == "unknown authentication mechanism 'EXTERNAL'"
    assert authenticate_error(db, "plain", b"\0alice\0wonder land").reply_code == 503


# --- EXTERNAL (a verified TLS client certificate names the user) -----------------------------


def test_external_logs_in_the_certificate_user_without_a_password(db: UsersDB) -> None:
    assert external_login(db, b"", "alice", "192.0.2.7").name == "alice"
    assert external_login(db, b"alice", "alice", "192.0.2.7").name == "alice"  # authzid: itself


@pytest.mark.parametrize(
    ("response", "login", "reason"),
    [
        (b"", "mallory", "certificate user 'mallory' - no such user"),
        (b"root", "alice", "certificate user 'alice' may not act as 'root'"),
        (b"\xff", "alice", "EXTERNAL response is not UTF-8"),
        (b"", None, "EXTERNAL without a verified client certificate"),
    ],
)
def test_external_refusals_say_why_in_the_log_only(
    db: UsersDB, response: bytes, login: str | None, reason: str
) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        external_login(db, response, login, "127.0.0.1")
    assert (caught.value.reply_code, caught.value.reply_text, caught.value.reason) == (
        403,
        refused("EXTERNAL"),
        reason,
    )


def test_external_keeps_guest_on_loopback(default_db: UsersDB) -> None:
    assert external_login(default_db, b"", "guest", "::1").name == "guest"
    with pytest.raises(AuthenticationFailed, match="EXTERNAL"):
        external_login(default_db, b"", "guest", "192.0.2.7")
