"""SASL for Connection.Start-Ok: PLAIN and AMQPLAIN, answered with RabbitMQ's reply texts.

The reply text a client sees never says why a login failed (that would help whoever is
guessing); `AuthenticationFailed.reason` holds the real cause for the broker log, as
RabbitMQ's "For details see the broker logfile" promises.
"""

from __future__ import annotations

import struct

from pamqp import decode

from gateway.security.users import User, UsersDB
from gateway.wire.tables import check_table

MECHANISMS = ("PLAIN", "AMQPLAIN")


class AuthenticationFailed(Exception):
    """Login refused. Send `reply_code`/`reply_text` to the client, log `reason`.

    `reply_code` is 403 ACCESS_REFUSED, except 503 COMMAND_INVALID for a mechanism we never
    offered, as RabbitMQ replies.
    """

    def __init__(self, reply_text: str, reason: str, reply_code: int = 403) -> None:
        super().__init__(reply_text)
        self.reply_text = reply_text
        self.reason = reason
        self.reply_code = reply_code


def _refused(mechanism: str, reason: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
        reason,
    )


def authenticate(db: UsersDB, mechanism: str, response: bytes, peer_host: str) -> User:
    """Check a Start-Ok's credentials from `peer_host`; the user, or AuthenticationFailed.

    CPU-bound for about 40 ms (scrypt) unless the same credentials succeeded recently, so the
    server may run it in a worker thread.
    """
    if mechanism == "PLAIN":
        username, password = _plain(response)
    elif mechanism == "AMQPLAIN":
        username, password = _amqplain(response)
    else:
        shown = mechanism[:40]
        raise AuthenticationFailed(
            f"COMMAND_INVALID - unknown authentication mechanism '{shown}'",
            f"unknown authentication mechanism {shown!r}",
            503,
        )
    user = db.get(username)
    if user is not None and not user.may_connect_from(peer_host):
        # Checked before the password: remote guesses at guest cost us no scrypt.
        raise _refused(mechanism, f"user {username!r} can only connect via localhost")
    if not password:
        raise _refused(mechanism, f"user {username!r} attempted to log in with a blank password")
    verified = db.verify(username, password)  # unknown users cost the same, see UsersDB
    if user is None or not verified:
        why = "wrong password" if user is not None else "no such user"
        raise _refused(mechanism, f"user {username!r} - invalid credentials ({why})")
    return user


def _plain(response: bytes) -> tuple[str, str]:
    """RFC 4616: [authzid] NUL authcid NUL passwd; we only allow acting as oneself."""
    parts = response.split(b"\0")
    if len(parts) != 3:
        raise _refused("PLAIN", "malformed PLAIN response (expected authzid NUL user NUL password)")
    try:
        authzid, username, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise _refused("PLAIN", "PLAIN response is not UTF-8") from None
    if not username:
        raise _refused("PLAIN", "PLAIN response has an empty user name")
    if authzid and authzid != username:
        raise _refused("PLAIN", f"user {username!r} may not act as {authzid!r}")
    return username, password


def _amqplain(response: bytes) -> tuple[str, str]:
    """A field table holding LOGIN and PASSWORD, normally without its 4-byte length.

    py-amqp (kombu) strips the length as the spec's AMQPLAIN says; some clients keep it. A
    prefix is recognised when it equals the rest's length: a table without one starts with a
    key-length octet and a key, which would read as a length of over 16 MB.
    """
    if len(response) >= 4 and struct.unpack_from(">I", response)[0] == len(response) - 4:
        table = response
    else:
        table = struct.pack(">I", len(response)) + response
    try:
        check_table(table, 0, "AMQPLAIN response")
        _, fields = decode.field_table(table)
    except (ValueError, IndexError, struct.error):
        raise _refused("AMQPLAIN", "malformed AMQPLAIN response (not a field table)") from None
    credentials = []
    for key in ("LOGIN", "PASSWORD"):
        value = fields.get(key)
        if isinstance(value, bytes | bytearray):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise _refused("AMQPLAIN", f"AMQPLAIN {key} is not UTF-8") from None
        if not isinstance(value, str):
            raise _refused("AMQPLAIN", f"AMQPLAIN response has no {key} string")
        credentials.append(value)
    if not credentials[0]:
        raise _refused("AMQPLAIN", "AMQPLAIN response has an empty LOGIN")
    return credentials[0], credentials[1]
