"""Node processes and what clients send: a name with a newline (or any control character)
cannot forge a line in the node's log, whichever call site logs it; tracebacks keep their
lines."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pika
import pika.exceptions
import pytest

from gateway.logformat import LOG_FORMAT, EscapingFormatter, escape_controls
from tests.nodes import start_node

FORGED = "2026-11-27 12:00:00,000 WARNING gateway.server: forged line"


def test_a_queue_name_and_a_user_name_with_newlines_forge_no_log_line(tmp_path: Path) -> None:
    node = start_node(tmp_path)
    try:
        connection = pika.BlockingConnection(pika.URLParameters(node.url()))
        try:
            channel = connection.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
                channel.queue_declare(f"q\n{FORGED}\r\x1b[2J", passive=True)
            assert missing.value.reply_code == 404
        finally:
            connection.close()
        credentials = pika.PlainCredentials(f"eve\n{FORGED}", "x")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(pika.ConnectionParameters(node.host, node.port, credentials=credentials))
    finally:
        node.stop()
    lines = node.log().splitlines()
    assert not [line for line in lines if line.startswith(FORGED[:23])]
    escaped = [line for line in lines if "forged line" in line]
    assert any(f"q\\x0a{FORGED}\\x0d\\x1b[2J" in line for line in escaped), escaped
    assert any(f"eve\\n{FORGED}" in line for line in escaped), escaped  # logged as repr() already


def test_messages_are_escaped_and_tracebacks_keep_their_lines_indented() -> None:
    formatter = EscapingFormatter(LOG_FORMAT)
    try:
        raise ValueError(f"no queue 'q\n{FORGED}'")
    except ValueError:
        record = logging.LogRecord(
            "gateway.x", logging.ERROR, __file__, 1, "queue %r\n%s", ("a\nb", "c\u2028d\x85"), sys.exc_info()
        )
    first, *rest = formatter.format(record).split("\n")
    assert first.endswith("gateway.x: queue 'a\\nb'\\x0ac\\u2028d\\x85")
    assert rest[0] == "  Traceback (most recent call last):"
    assert rest[-2:] == ["  ValueError: no queue 'q", f"  {FORGED}'"]  # indented: no record of its own
    assert all(line.startswith("  ") for line in rest)
    assert escape_controls("tab\there\x7f") == "tab\\x09here\\x7f"
