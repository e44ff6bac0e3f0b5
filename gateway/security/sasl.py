"""SASL for Connection.Start-Ok: PLAIN and AMQPLAIN, answered with RabbitMQ's reply texts, and
EXTERNAL over TLS: the verified client certificate names the user (RabbitMQ's
rabbitmq_auth_mechanism_ssl), who must exist in the users file; no password is asked.

The reply text a client sees never says why a login failed (that would help whoever is
guessing); `AuthenticationFailed.reason` holds the real cause for the broker log, as
RabbitMQ's "For details see the broker logfile" promises.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pamqp import decode

from gateway.security.users import User, UsersDB
from gateway.wire.tables import check_table

MECHANISMS = ("PLAIN", "AMQPLAIN")
#: Offered only on TLS connections whose client sent a verified certificate.
EXTERNAL = "EXTERNAL"


class AuthenticationFailed(Exception):
    """Login refused. Send `reply_code`/`reply_text` to the client, log `reason`.

    `reply_code` is 403 ACCESS_REFUSED, except 503 COMMAND_INVALID for a mechanism we never
    offered, as RabbitMQ replies. `logged` is set when the refusal was logged already (the
    login throttle logs once per burst, not once per attempt).
    """

    def __init__(self, reply_text: str, reason: str, reply_code: int = 403, *, logged: bool = False) -> None:
        super().__init__(reply_text)
        self.reply_text = reply_text
        self.reason = reason
        self.reply_code = reply_code
        self.logged = logged


def _refused(mechanism: str, reason: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile.",
        reason,
    )


@dataclass(frozen=True)
class LoginRequest:
    """A Start-Ok's credentials that passed the cheap checks; only the password is left."""

    mechanism: str
    username: str
    password: str
    #: None for a user the node does not know (still checked against a decoy: same cost).
    user: User | None

    def refused(self) -> AuthenticationFailed:
        """The refusal when the password check fails."""
        why = "wrong password" if self.user is not None else "no such user"
        return _refused(self.mechanism, f"user {self.username!r} - invalid credentials ({why})")


def login_request(db: UsersDB, mechanism: str, response: bytes, peer_host: str) -> LoginRequest:
    """Decode a Start-Ok's response from `peer_host` and refuse what needs no password check
    (AuthenticationFailed): an unknown mechanism, a malformed response, a blank password, a
    loopback-only user from elsewhere."""
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
    return LoginRequest(mechanism, username, password, user)


def external_login(db: UsersDB, response: bytes, tls_login: str | None, peer_host: str) -> User:
    """EXTERNAL: the user the client certificate names (`tls_login`), if the users file knows
    it. The response, an authorization identity, may be empty or that same name; acting as
    anyone else is refused, as PLAIN refuses it."""
    if tls_login is None:  # the wire refuses a mechanism it did not offer; this is a safeguard
        raise _refused(EXTERNAL, "EXTERNAL without a verified client certificate")
    try:
        authzid = response.decode("utf-8")
    except UnicodeDecodeError:
        raise _refused(EXTERNAL, "EXTERNAL response is not UTF-8") from None
    if authzid and authzid != tls_login:
        raise _refused(EXTERNAL, f"certificate user {tls_login!r} may not act as {authzid!r}")
    user = db.get(tls_login)
    if user is None:
        raise _refused(EXTERNAL, f"certificate user {tls_login!r} - no such user")
    if not user.may_connect_from(peer_host):
        raise _refused(EXTERNAL, f"user {tls_login!r} can only connect via localhost")
    return user


def authenticate(db: UsersDB, mechanism: str, response: bytes, peer_host: str) -> User:
    """Check a Start-Ok's credentials from `peer_host`; the user, or AuthenticationFailed.

    CPU-bound for about 40 ms (scrypt) unless the same credentials succeeded recently. The
    server goes through gateway.security.logins instead, which adds a throttle and a bound on
    concurrent checks around the same steps.
    """
    request = login_request(db, mechanism, response, peer_host)
    verified = db.verify(request.username, request.password)  # unknown users cost the same
    if request.user is None or not verified:
        raise request.refused()
    return request.user


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
