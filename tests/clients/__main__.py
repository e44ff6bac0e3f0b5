"""``python -m tests.clients``: fetch the client test suites, start a node, run each against it.

Not part of the normal test run: it needs the package registries and the clients' repositories,
a free port 5672 (several suites hard-code localhost:5672) and some minutes. Each suite's
output goes to WORK/logs/NAME.log; the table at the end is what docs/clients.md records.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tests.clients.suites import SUITES, Counts, Suite
from tests.nodes import start_node

#: The port the suites assume when they ignore their URL variable.
PORT = 5672


def run_suite(suite: Suite, work: Path, url: str) -> Counts:
    """Fetch `suite`, run it with its output in WORK/logs, and count its outcome."""
    source = suite.fetch(work)
    log_path = work / "logs" / f"{suite.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        subprocess.run(
            suite.command(work, source),
            cwd=source,
            env=suite.env(work, url),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=1800,
        )
    return suite.count(log_path.read_text(errors="replace"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.clients", description=__doc__)
    parser.add_argument("--work", type=Path, default=Path("var/clients"), help="where suites go")
    parser.add_argument("--only", nargs="+", choices=[suite.name for suite in SUITES])
    args = parser.parse_args(argv)
    work: Path = args.work.resolve()
    # Every interface, so that amqplib's amqp://[::1] test reaches it too.
    node = start_node(work / "node", "--host", "*", name="clients", port=PORT)
    url = f"amqp://guest:guest@localhost:{PORT}/"
    try:
        print(
            f"{'suite':<12} {'version':<8} {'passed':>6} {'failed':>6} {'skipped':>7} {'cancelled':>9} {'not run':>7}"
        )
        for suite in SUITES:
            if args.only and suite.name not in args.only:
                continue
            counts = run_suite(suite, work, url)
            print(
                f"{suite.name:<12} {suite.version:<8} {counts.passed:>6} {counts.failed:>6} "
                f"{counts.skipped:>7} {counts.cancelled:>9} {counts.not_run:>7}",
                flush=True,
            )
    finally:
        node.stop()
    print(f"logs in {work / 'logs'}; node log {node.log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
