"""Where a peer node is: `BrokerAddress`, parsed from qpid-route's "[user/password@]host[:port]"
or an AMQP URL, "amqp://user:password@host:port/vhost" (RabbitMQ's form, percent-encoded).

A password written in an address is visible to every user of the machine (`ps`); `user@host`
and `amqp://user@host` leave it out (an empty password), for the CLIs to fill from a file,
standard input, AMQ_PASSWORD or a prompt (gateway.security.password_input).

`str(address)` is `host:port` without credentials: it is what link lists and logs show, so a
password never reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from gateway.names import DEFAULT_PORT


@dataclass(frozen=True)
class BrokerAddress:
    """A peer's host, port and PLAIN credentials (guest/guest unless given)."""

    host: str
    port: int = DEFAULT_PORT
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    #: The vhost a URL's path names (None: not given, the command's --vhost or "/").
    vhost: str | None = None

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
        return cls(host, port, username, password)

    @classmethod
    def _parse_url(cls, text: str) -> BrokerAddress:
        """`amqp://[user:password@]host[:port][/vhost]`, each part percent-encoded (so vhost
        "/" is `%2F`); an empty path leaves the vhost unset, a query is ignored."""
        scheme, _, rest = text.partition("://")
        if scheme != "amqp":
            raise ValueError(f"broker address {text!r}: only amqp:// URLs are supported (no TLS)")
        authority, slash, path = rest.partition("/")
        credentials, at, location = authority.rpartition("@")
        username, password = "guest", "guest"
        if at:
            username, _, password = (unquote(part) for part in credentials.partition(":"))
            if not username:
                raise ValueError(f"broker address {text!r}: a URL's credentials are user[:password]")
        host, port = _location(text, location)
        vhost = unquote(path.partition("?")[0]) if slash else ""
        return cls(unquote(host), port, username, password, vhost or None)

    @property
    def needs_password(self) -> bool:
        """A user was named without a password (`user@host`): the CLI supplies it."""
        return not self.password

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _credentials(text: str, credentials: str) -> tuple[str, str]:
    username, _, password = credentials.partition("/")
    if not username:
        raise ValueError(f"broker address {text!r} has an empty user name")
    return username, password


def _location(text: str, location: str) -> tuple[str, int]:
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
    return host, _port(text, port_text)


def _port(text: str, port_text: str | None) -> int:
    if port_text is None:
        return DEFAULT_PORT
    if not port_text:
        raise ValueError(f"broker address {text!r} has an empty port")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"broker address {text!r} has port {port_text!r}, which is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"broker address {text!r} has port {port}, outside 1..65535")
    return port
