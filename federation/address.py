"""Where a peer node is: `BrokerAddress`, parsed from qpid-route's "[user/password@]host[:port]".

`str(address)` is `host:port` without credentials: it is what link lists and logs show, so a
password never reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.names import DEFAULT_PORT


@dataclass(frozen=True)
class BrokerAddress:
    """A peer's host, port and PLAIN credentials (guest/guest unless given)."""

    host: str
    port: int = DEFAULT_PORT
    username: str = "guest"
    password: str = field(default="guest", repr=False)

    @classmethod
    def parse(cls, text: str) -> BrokerAddress:
        """Parse `host`, `host:port`, `user/password@host:port` or `[::1]:5673`.

        The password may contain "@" and "/" (the last "@" ends the credentials, the first "/"
        ends the user name). Raises ValueError with a sentence naming the problem.
        """
        if not text or text != text.strip() or any(c.isspace() for c in text):
            raise ValueError(f"broker address {text!r} is empty or contains whitespace")
        if "://" in text:
            raise ValueError(f"broker address {text!r} is a URL; write [user/password@]host[:port]")
        credentials, at, location = text.rpartition("@")
        username, password = _credentials(text, credentials) if at else ("guest", "guest")
        host, port = _location(text, location)
        return cls(host, port, username, password)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _credentials(text: str, credentials: str) -> tuple[str, str]:
    username, slash, password = credentials.partition("/")
    if not slash:
        raise ValueError(f"broker address {text!r}: credentials must be user/password")
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
