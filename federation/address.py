"""Where a peer node is: `BrokerAddress`, parsed from qpid-route's "[user/password@]host[:port]"
or an AMQP URL, "amqp://user:password@host:port/vhost" (RabbitMQ's form, percent-encoded), or
"amqps://..." for TLS, with the TLS options of RabbitMQ's URI query parameters: cacertfile,
certfile, keyfile and verify (verify_peer, the default, or verify_none). An amqps URL with a client certificate and no credentials logs in with
SASL EXTERNAL: the certificate names the user.

A password written in an address is visible to every user of the machine (`ps`); `user@host`
and `amqp://user@host` leave it out (an empty password), for the CLIs to fill from a file,
standard input, AMQ_PASSWORD or a prompt (gateway.security.password_input).

`str(address)` is `host:port` without credentials: it is what link lists and logs show, so a
password never reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qs, unquote

from gateway.names import DEFAULT_PORT, DEFAULT_TLS_PORT, TLS_TRANSPORT
from gateway.tls import ClientTls

#: The SASL mechanisms a client logs in with: PLAIN with a user and password, EXTERNAL with a
#: TLS client certificate.
PLAIN = "PLAIN"
EXTERNAL = "EXTERNAL"
#: RabbitMQ's URI query parameters for TLS, and what each one sets.
_TLS_QUERY = {"cacertfile": "ca", "certfile": "cert", "keyfile": "key"}
_VERIFY_QUERY = {"verify_peer": True, "verify_none": False}


@dataclass(frozen=True)
class BrokerAddress:
    """A peer's host, port and credentials (guest/guest unless given), and how to reach it
    over TLS (None: plain TCP)."""

    host: str
    port: int = DEFAULT_PORT
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    #: The vhost a URL's path names (None: not given, the command's --vhost or "/").
    vhost: str | None = None
    tls: ClientTls | None = None
    #: Whether the text named credentials: without them, a TLS client with a certificate logs
    #: in with EXTERNAL (see `with_tls`), and without TLS guest/guest is used.
    login_given: bool = field(default=True, compare=False)

    @property
    def mechanism(self) -> str:
        """EXTERNAL for a TLS client with a certificate and no user name, PLAIN otherwise."""
        if self.tls is not None and self.tls.cert is not None and not self.username:
            return EXTERNAL
        return PLAIN

    def with_tls(self, tls: ClientTls) -> BrokerAddress:
        """This address over TLS; without credentials given, and with a client certificate,
        it logs in with EXTERNAL (an empty user name) instead of as guest."""
        if not self.login_given and tls.cert is not None:
            return replace(self, tls=tls, username="", password="")
        return replace(self, tls=tls)

    @classmethod
    def parse(cls, text: str) -> BrokerAddress:
        """Parse `host`, `host:port`, `user/password@host:port`, `user@host:port` (no password:
        an empty one), `[::1]:5673` or an `amqp://user:password@host:port/vhost` URL.

        The password may contain "@" and "/" (the last "@" ends the credentials, the first "/"
        ends the user name). Raises ValueError with a sentence naming the problem.
        """
        if not text or text != text.strip() or any(c.isspace() for c in text):
            raise ValueError(f"broker address {text!r} is empty or contains whitespace")
        if "://" in text:
            return cls._parse_url(text)
        credentials, at, location = text.rpartition("@")
        username, password = _credentials(text, credentials) if at else ("guest", "guest")
        host, port = _location(text, location)
        return cls(host, port, username, password, login_given=bool(at))

    @classmethod
    def _parse_url(cls, text: str) -> BrokerAddress:
        """`amqp[s]://[user:password@]host[:port][/vhost][?query]`, each part percent-encoded
        (so vhost "/" is `%2F`); an empty path leaves the vhost unset. The query matters to
        amqps (the TLS options, see the module docstring); other parameters are ignored."""
        scheme, _, rest = text.partition("://")
        if scheme not in ("amqp", "amqps"):
            raise ValueError(f"broker address {text!r}: only amqp:// and amqps:// URLs are supported")
        rest, _, query = rest.partition("?")
        authority, slash, path = rest.partition("/")
        credentials, at, location = authority.rpartition("@")
        username, password = "guest", "guest"
        if at:
            username, _, password = (unquote(part) for part in credentials.partition(":"))
            if not username:
                raise ValueError(f"broker address {text!r}: a URL's credentials are user[:password]")
        host, port = _location(text, location, DEFAULT_TLS_PORT if scheme == "amqps" else DEFAULT_PORT)
        vhost = unquote(path) if slash else ""
        address = cls(unquote(host), port, username, password, vhost or None, login_given=bool(at))
        return address.with_tls(_url_tls(text, query)) if scheme == "amqps" else address

    @property
    def needs_password(self) -> bool:
        """A user was named without a password (`user@host`): the CLI supplies it (an
        EXTERNAL login, with no user name, needs none)."""
        return bool(self.username) and not self.password

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _credentials(text: str, credentials: str) -> tuple[str, str]:
    username, _, password = credentials.partition("/")
    if not username:
        raise ValueError(f"broker address {text!r} has an empty user name")
    return username, password


def link_tls(
    transport: str, ca: str | None, cert: str | None, key: str | None, default: ClientTls | None
) -> ClientTls | None:
    """How a node's link or peering opens TLS: its own paths, each else the node's (`default`,
    its tls_ca, tls_cert and tls_key); None for tcp."""
    if transport != TLS_TRANSPORT:
        return None
    base = default or ClientTls()
    return ClientTls(
        Path(ca) if ca else base.ca,
        Path(cert) if cert else base.cert,
        Path(key) if key else (None if cert else base.key),
    )


def _url_tls(text: str, query: str) -> ClientTls:
    """The TLS options of an amqps URL's query (RabbitMQ's parameter names)."""
    values = {key: found[-1] for key, found in parse_qs(query).items()}
    paths = {_TLS_QUERY[key]: Path(value) for key, value in values.items() if key in _TLS_QUERY}
    verify = values.get("verify", "verify_peer")
    if verify not in _VERIFY_QUERY:
        raise ValueError(f"broker address {text!r}: verify is verify_peer or verify_none, not {verify!r}")
    if "key" in paths and "cert" not in paths:
        raise ValueError(f"broker address {text!r}: keyfile needs certfile")
    return ClientTls(paths.get("ca"), paths.get("cert"), paths.get("key"), _VERIFY_QUERY[verify])


def _location(text: str, location: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """The host and port of "host", "host:port", "[v6]" or "[v6]:port"."""
    if location.startswith("["):
        host, bracket, rest = location[1:].partition("]")
        if not bracket:
            raise ValueError(f"broker address {text!r} has an IPv6 address without its closing ']'")
        if rest and not rest.startswith(":"):
            raise ValueError(f"broker address {text!r} has {rest!r} after the IPv6 address")
        port_text = rest[1:] if rest else None
    elif location.count(":") > 1:
        raise ValueError(f"broker address {text!r}: write IPv6 addresses in brackets, as in [::1]:5672")
    else:
        host, colon, port_text_or_empty = location.partition(":")
        port_text = port_text_or_empty if colon else None
    if not host:
        raise ValueError(f"broker address {text!r} has no host")
    return host, _port(text, port_text, default_port)


def _port(text: str, port_text: str | None, default_port: int) -> int:
    if port_text is None:
        return default_port
    if not port_text:
        raise ValueError(f"broker address {text!r} has an empty port")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"broker address {text!r} has port {port_text!r}, which is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"broker address {text!r} has port {port}, outside 1..65535")
    return port
