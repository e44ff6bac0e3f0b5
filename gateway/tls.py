"""TLS for the node's listener and for links: Python's `ssl` contexts under `trio.SSLStream`.

Nothing here does cryptography: OpenSSL does it all, through the standard library. This module
turns paths and options into `ssl.SSLContext`s, reads the login a verified client certificate
names (SASL EXTERNAL, as RabbitMQ's rabbitmq_auth_mechanism_ssl does), and puts a failed
handshake into words for logs and for a link's Last Error.

Verification modes, as `--tls-verify` spells them: `none` asks for no client certificate;
`peer` asks for one and checks any that comes against the node's tls_ca (a client without one
may still log in with a password); `require` refuses a client without a valid certificate in
the handshake. Without a tls_ca no client certificate is asked for.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.names import DEFAULT_TLS_PORT

VERIFY_MODES = ("none", "peer", "require")
_VERIFY = {"none": ssl.CERT_NONE, "peer": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}
#: Which part of a client certificate's subject names the user: its common name, or the whole
#: distinguished name (RabbitMQ's ssl_cert_login_from common_name / distinguished_name).
LOGIN_FIELDS = ("cn", "dn")
#: Subject attributes in a distinguished name, as RFC 4514 abbreviates them.
_DN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
}
#: OpenSSL reasons that mean a certificate was refused (ours by the peer, or the peer's by us):
#: retrying with the same certificates cannot succeed.
_REFUSAL_REASONS = ("CERTIFICATE", "UNKNOWN_CA", "BAD_CERTIFICATE", "HANDSHAKE_FAILURE", "ACCESS_DENIED")


def tls_problem(values: Mapping[str, object]) -> tuple[str, str] | None:
    """(key, what is wrong) when the TLS keys do not make a listener: a certificate needs its
    key, and every other tls_* key needs a certificate."""
    if "tls_cert" in values and "tls_key" not in values:
        return "tls_cert", "needs tls_key (the certificate's private key) too"
    if "tls_key" in values and "tls_cert" not in values:
        return "tls_key", "needs tls_cert too"
    if "tls_cert" not in values:
        for key in sorted(values):
            if key.startswith("tls_"):
                return key, "needs tls_cert and tls_key (the node's certificate)"
    if values.get("tls_verify") == "require" and "tls_ca" not in values:
        return "tls_verify", "require needs tls_ca (the CA client certificates are checked against)"
    return None


class TlsError(Exception):
    """A certificate or key that cannot be loaded; the text names the file and the reason."""


@dataclass(frozen=True)
class ServerTls:
    """The node's TLS listener: its certificate and key, the CA its clients' certificates are
    checked against, how strictly, and which subject field names an EXTERNAL login."""

    cert: Path
    key: Path
    ca: Path | None = None
    verify: str = "peer"
    port: int = DEFAULT_TLS_PORT
    #: Close the plain AMQP port: every client must use TLS (Qpid Java's sslOnly).
    only: bool = False
    login_field: str = "cn"

    def context(self) -> ssl.SSLContext:
        """A server context; TlsError when a file cannot be loaded.

        Client certificates are checked against `ca` only, never the system's CAs (which
        `ssl.create_default_context` would load): any certificate a public CA signed for
        CN=admin would otherwise log in as admin with EXTERNAL. Without `ca` no client
        certificate is asked for.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, self.cert, self.key)
        if self.ca is not None and self.verify != "none":
            _load_ca(context, self.ca)
            context.verify_mode = _VERIFY[self.verify]
        return context


@dataclass(frozen=True)
class ClientTls:
    """How a client (a link, a CLI) opens TLS: the CA to check the server against (None: the
    system's), a client certificate and key to present (for EXTERNAL), and whether to check
    the server's certificate and host name at all (RabbitMQ URIs' verify=verify_none)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if self.cert is not None:
            _load_chain(context, self.cert, self.key)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca is not None:
            _load_ca(context, self.ca)
        return context


def _load_chain(context: ssl.SSLContext, cert: Path, key: Path | None) -> None:
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load certificate {cert} with key {key or cert}: {_reason(exc)}") from None


def _load_ca(context: ssl.SSLContext, ca: Path) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load CA certificates from {ca}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    """The OpenSSL error behind a failed handshake (trio wraps it in BrokenResourceError)."""
    for error in (exc, exc.__cause__):
        if isinstance(error, ssl.SSLError):
            return error
    return None


def handshake_failure(exc: BaseException) -> str:
    """Why a TLS handshake failed, in OpenSSL's words ("certificate verify failed: certificate
    has expired", "wrong version number", "tlsv1 alert unknown ca")."""
    cause = _ssl_cause(exc)
    if cause is None or isinstance(cause, ssl.SSLEOFError):
        return "connection closed during the TLS handshake"
    return _reason(cause)


def is_refusal(exc: BaseException) -> bool:
    """Whether a failed handshake refused a certificate (permanent) rather than broke off."""
    cause = _ssl_cause(exc)
    if isinstance(cause, ssl.SSLCertVerificationError):
        return True
    reason = str(getattr(cause, "reason", None) or "")
    return any(word in reason for word in _REFUSAL_REASONS)


def peer_login(peercert: dict[str, Any] | None, field: str) -> str | None:
    """The login a verified client certificate names (its subject's CN, or its whole DN), from
    `SSLStream.getpeercert()`; None when the client sent no certificate (or it was not
    verified: `--tls-verify none`)."""
    subject = (peercert or {}).get("subject")
    if not subject:
        return None
    pairs = [(name, value) for rdn in subject for name, value in rdn]
    if field == "cn":
        names = [value for name, value in pairs if name == "commonName"]
        return names[-1] if names else None
    # RFC 4514 writes the most specific attribute first; the certificate stores it last.
    return ",".join(f"{_DN_NAMES.get(name, name)}={_escape_dn(value)}" for name, value in reversed(pairs))


def _escape_dn(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    return f"\\{escaped}" if escaped.startswith(("#", " ")) else escaped
