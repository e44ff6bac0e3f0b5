"""What the README and docs/amqp.md claim about the project itself holds: the license, the
folders named, how to reach the CLIs, where the pika example is, and when the node sends
Connection.Blocked."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_license_file_is_the_one_pyproject_names() -> None:
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert re.match(r"\s*Apache License\s+Version 2\.0, January 2004\s", text)
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202


def test_every_folder_the_readme_names_exists() -> None:
    named = set(re.findall(r"`([a-z_]+)/`", README))
    assert {"gateway", "configs", "spark"} <= named
    assert sorted(name for name in named if not (ROOT / name).is_dir()) == []


def test_the_readme_says_where_the_pika_example_is() -> None:
    example = README.index("## Connect with pika")
    for mention in re.finditer(r"the pika example (above|below)", README):
        assert mention.group(1) == ("above" if mention.start() > example else "below")


def test_the_readme_says_how_to_run_the_clis_after_dev_up() -> None:
    assert "source .venv/bin/activate" in README
    dev = (ROOT / "dev").read_text()
    for passthrough in ("route", "config", "clean", "sim"):
        assert f"./dev {passthrough}" in README
        assert re.search(rf"^\s+{passthrough}\) setup; exec \.venv/bin/", dev, re.M), passthrough


def test_docs_amqp_md_names_every_reason_for_connection_blocked() -> None:
    """Every hold of a publisher sends Connection.Blocked (gateway.broker.hold): the memory and
    disk alarms, an overfull queue, a full federation outbox."""
    text = (ROOT / "docs" / "amqp.md").read_text()
    claims = [
        p for p in re.split(r"\n\s*\n|\n- ", text) if re.search(r"Connection\.Blocked (is sent|comes)", p)
    ]
    assert claims
    for claim in claims:
        flat = " ".join(claim.split())
        for reason in ("memory alarm", "disk alarm", "overfull queue", "federation outbox"):
            assert reason in flat, (reason, flat)
    assert "no memory alarm" not in text
