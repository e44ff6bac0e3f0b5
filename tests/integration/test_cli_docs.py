"""docs/cli.md's amq-config outputs are what a node prints: its commands run on a fresh node and
every output block shown after them is compared verbatim (amq-config's own reply queue, named
anew each run, aside)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.nodes import start_node

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
AMQ_CONFIG = Path(sys.executable).parent / "amq-config"
#: The output blocks compared, by the text that leads into each, and the command giving it.
SHOWN = {"The summary, labels right-aligned": [], "`exchanges`:": ["exchanges"]}
SHOWN |= {"`-b exchanges`:": ["-b", "exchanges"], "`-b queues`:": ["-b", "queues"]}
REPLY_QUEUE = re.compile(r"amq\.gen-[\w-]+")


def block_after(text: str, lead: str) -> str:
    """The first fenced block after `lead`, without its fences."""
    match = re.search(re.escape(lead) + r".*?```[a-z]*\n(.*?)```", text, re.S)
    assert match, f"docs/cli.md lost its block after {lead!r}"
    return match.group(1)


def test_the_amq_config_outputs_in_docs_cli_md_are_verbatim(tmp_path: Path) -> None:
    text = CLI_MD.read_text()
    node = start_node(tmp_path, name="docs")
    try:

        def amq_config(*args: str) -> str:
            result = subprocess.run(
                [str(AMQ_CONFIG), "-a", f"127.0.0.1:{node.port}", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            return result.stdout

        setup = block_after(text, "The outputs below are verbatim")
        for line in setup.splitlines():
            command = shlex.split(line)
            assert command[0] == "amq-config"
            amq_config(*command[1:])
        for lead, args in SHOWN.items():
            shown = block_after(text, lead)
            assert REPLY_QUEUE.sub("amq.gen-", amq_config(*args)) == REPLY_QUEUE.sub("amq.gen-", shown), lead
    finally:
        node.stop()
