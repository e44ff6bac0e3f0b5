"""AMQP errors as values: a reply code, its text, and the method that caused it.

The spec splits reply codes into soft ones, which close only the channel, and hard ones,
which close the whole connection. Every layer raises `AMQPError`; the server reads
`connection_level` to decide which Close to send, so the scoping rule lives here once.
"""

from __future__ import annotations

from typing import Any

#: Reply codes that close the connection (the spec's "hard errors").
HARD_ERRORS = frozenset({320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541})

#: The spec's names, used in reply texts as RabbitMQ does ("NOT_FOUND - no queue 'x' ...").
REPLY_NAMES = {
    200: "REPLY_SUCCESS",
    311: "CONTENT_TOO_LARGE",
    312: "NO_ROUTE",
    313: "NO_CONSUMERS",
    320: "CONNECTION_FORCED",
    402: "INVALID_PATH",
    403: "ACCESS_REFUSED",
    404: "NOT_FOUND",
    405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED",
    501: "FRAME_ERROR",
    502: "SYNTAX_ERROR",
    503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR",
    505: "UNEXPECTED_FRAME",
    506: "RESOURCE_ERROR",
    530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED",
    541: "INTERNAL_ERROR",
}


class AMQPError(Exception):
    """An error the peer must be told about with a Channel.Close or Connection.Close."""

    def __init__(self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0):
        super().__init__(reply_code, reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def connection_level(self) -> bool:
        """True when the spec says this code closes the connection, not just the channel."""
        return self.reply_code in HARD_ERRORS

    def __str__(self) -> str:
        return self.reply_text

    def __repr__(self) -> str:
        return f"AMQPError({self.reply_code}, {self.reply_text!r}, {self.class_id}, {self.method_id})"


def _ids(method: Any) -> tuple[int, int]:
    """The (class id, method id) pair of a pamqp method object, or (0, 0) for none."""
    if method is None:
        return 0, 0
    index = getattr(method, "index", 0)
    return index >> 16, index & 0xFFFF


def caused_by(error: AMQPError, method: Any) -> AMQPError:
    """`error` naming `method` (a pamqp method or its class) as the method that failed, unless
    it names one already: whatever fails while a method is handled is that method's failure,
    and clients show (and test) the class and method ids of the Close."""
    if error.class_id or method is None:
        return error
    return AMQPError(error.reply_code, error.reply_text, *_ids(method))


def error(reply_code: int, detail: str, method: Any = None) -> AMQPError:
    """Build an error whose text reads like RabbitMQ's: ``NAME - detail``."""
    class_id, method_id = _ids(method)
    return AMQPError(reply_code, f"{REPLY_NAMES[reply_code]} - {detail}", class_id, method_id)


def access_refused(detail: str, method: Any = None) -> AMQPError:
    return error(403, detail, method)


def not_found(detail: str, method: Any = None) -> AMQPError:
    return error(404, detail, method)


def resource_locked(detail: str, method: Any = None) -> AMQPError:
    return error(405, detail, method)


def precondition_failed(detail: str, method: Any = None) -> AMQPError:
    return error(406, detail, method)


def connection_forced(detail: str) -> AMQPError:
    return error(320, detail)


def frame_error(detail: str, method: Any = None) -> AMQPError:
    return error(501, detail, method)


def syntax_error(detail: str, method: Any = None) -> AMQPError:
    return error(502, detail, method)


def command_invalid(detail: str, method: Any = None) -> AMQPError:
    return error(503, detail, method)


def channel_error(detail: str, method: Any = None) -> AMQPError:
    return error(504, detail, method)


def unexpected_frame(detail: str, method: Any = None) -> AMQPError:
    return error(505, detail, method)


def resource_error(detail: str, method: Any = None) -> AMQPError:
    return error(506, detail, method)


def not_allowed(detail: str, method: Any = None) -> AMQPError:
    return error(530, detail, method)


def not_implemented(detail: str, method: Any = None) -> AMQPError:
    return error(540, detail, method)


def internal_error(detail: str, method: Any = None) -> AMQPError:
    return error(541, detail, method)
