"""The client-suite runner (python -m tests.clients) reads each suite's own summary."""

from __future__ import annotations

from tests.clients.suites import Counts, count_go, count_node, count_pytest


def test_pytest_counts_come_from_the_summary_line_only() -> None:
    # aiormq logs "connection.py:555 error when creating transport": not 555 errors.
    output = (
        "ERROR    aiormq.connection:connection.py:555 error when creating transport\n"
        "FAILED tests/test_connection.py::test_ssl_context\n"
        "= 6 failed, 558 passed, 1 skipped, 478 deselected, 1 warning in 209.54s (0:03:29) =\n"
    )
    assert count_pytest(output) == Counts(passed=558, failed=6, skipped=1, not_run=478)


def test_pytest_errors_count_as_failures() -> None:
    assert count_pytest("2 failed, 10 passed, 3 errors in 1.00s\n") == Counts(passed=10, failed=5)


def test_node_counts() -> None:
    output = "# tests 288\n# pass 283\n# fail 1\n# cancelled 4\n# skipped 0\n"
    assert count_node(output) == Counts(passed=283, failed=1, cancelled=4)


def test_go_counts_include_subtests() -> None:
    output = (
        "--- PASS: TestA (0.00s)\n    --- PASS: TestA/sub (0.00s)\n--- FAIL: TestB (1.00s)\n--- SKIP: TestC\n"
    )
    assert count_go(output) == Counts(passed=2, failed=1, skipped=1, not_run=1)
