"""The node's log format, and the one place where what clients send is made safe to log.

Names and strings taken from clients (queue, exchange and user names, routing keys, client
properties, the reply texts of their Close frames, adverts' sender names) reach log lines
through many call sites. Rather than trust each of them, `EscapingFormatter` escapes the
control characters of every formatted message, so that a newline in a queue name cannot
start a forged line and an escape sequence cannot rewrite a terminal showing the log. A
traceback keeps its lines, indented (its exception's message may quote a client too), so
every line that starts at the margin is a record's.
"""

from __future__ import annotations

import logging
import re
from typing import Any

#: The node's log line: time, level, logger, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: What starts each line of a traceback in the log.
TRACEBACK_INDENT = "  "

#: C0 controls, DEL, C1 controls, and Unicode's line and paragraph separators (which some
#: viewers break lines at).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with each control character written as a \\xNN (or \\uNNNN) escape."""
    return _CONTROL.sub(_escaped, text)


class EscapingFormatter(logging.Formatter):
    """A Formatter that escapes control characters in each record's message (see module)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802
        """The traceback line by line, each indented with its other control characters
        escaped: an exception's message may quote a client's string, and no line of a
        traceback may then pass for a record of its own."""
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join(TRACEBACK_INDENT + escape_controls(line) for line in text.split("\n"))


def configure_logging(level: str) -> None:
    """Log to stderr at `level` (debug, info, ...) through an EscapingFormatter."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(LOG_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
