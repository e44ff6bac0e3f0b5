"""Errors of the federation client, defined once for the client, the links and the CLIs.

They live apart from federation/client.py so that federation/link.py can tell them apart without
importing the client: links are tested with fake clients, and a link must know which failures
are worth retrying. The split it relies on:

- AuthenticationRefused is permanent: retrying with the same credentials cannot succeed, and
  hammering a peer with bad credentials looks like an attack, so a link stops (state Failed).
  TlsRefused, a certificate refused either way in the TLS handshake, is one of them.
- ConnectFailed, ConnectionLost and ConnectionClosedByPeer are transient: the peer may be back
  in a minute, so a link retries on its backoff schedule.
- ChannelClosedByPeer ends one channel, not the connection: it is a route's failure, and the
  link restarts that route without touching the others.

`str()` of each is the sentence `amq-route link list` shows as Last Error.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of the client's errors, so a CLI can report any of them with one except clause."""


class ConnectFailed(ClientError):
    """No connection was made: refused, unreachable, timed out before the handshake completed.

    Not a base of AuthenticationRefused on purpose: code that retries on ConnectFailed must not
    retry on refused credentials by accident.
    """


class AuthenticationRefused(ClientError):
    """The peer refused our credentials during the handshake; the text is the server's own."""


class TlsRefused(AuthenticationRefused):
    """A certificate was refused in the TLS handshake (the peer's by us, or ours by the peer),
    or ours cannot be loaded: as permanent as refused credentials, so a link stops (Failed)."""


class ConnectionLost(ClientError):
    """An open connection broke: a socket error, an EOF, or a peer silent for two heartbeats."""


class _ClosedByPeer(ClientError):
    """A Close the peer sent us, with its reply code and text (RabbitMQ's "NOT_FOUND - ...")."""

    scope = ""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        # Both arguments go to Exception so the error pickles and reprs with what built it.
        super().__init__(reply_code, reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text

    def __str__(self) -> str:
        return f"{self.scope} closed by peer: {self.reply_code} {self.reply_text}"


class ChannelClosedByPeer(_ClosedByPeer):
    """The peer closed one channel (Channel.Close); the connection and other channels go on."""

    scope = "channel"


class ConnectionClosedByPeer(_ClosedByPeer):
    """The peer closed the whole connection (Connection.Close), e.g. 320 when it shuts down."""

    scope = "connection"


class PublishNacked(ClientError):
    """The server refused or lost these publishes (their sequence numbers)."""

    def __init__(self, seqs: list[int]) -> None:
        super().__init__(f"{len(seqs)} publish(es) nacked: {seqs[:10]}")
        self.seqs = seqs


class ConsumerCancelled(ClientError):
    """The server cancelled a consumer (its queue was deleted), after the deliveries before it."""

    def __init__(self, consumer_tag: str) -> None:
        super().__init__(f"consumer {consumer_tag!r} was cancelled by the server")
        self.consumer_tag = consumer_tag
