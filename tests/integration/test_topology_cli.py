"""`amq-route topology` against real node processes: the seed's walkthrough written as a
topology file, applied, maps live exactly as the file maps offline; `map --live` marks drift
and links that are down; `check` and the commands that refuse a wrong file exit 1 with the
findings' count. Every wait is bounded."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from tests.integration.test_federation_routes import BIN, cli, unstated
from tests.nodes import NodeProcess, on_free_ports

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


async def test_walkthrough_offline_map_equals_the_live_map_after_apply(
    nodes: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    topology = tmp_path / "walkthrough.toml"
    ports = on_free_ports(CONFIGS / "topology-walkthrough.toml", topology)
    brokers = [nodes(f"broker{number}", port=port) for number, port in enumerate(ports, 1)]
    file = str(topology)
    with trio.fail_after(90):
        status, out, err = await cli("amq-route", "topology", "apply", file)
        assert status == 0, out + err
        assert "Apply complete" in out
        maps = []
        for name, node in (("broker3", brokers[2]), ("broker1", brokers[0])):
            status, offline, err = await cli("amq-route", "topology", "map", file, "--from", name)
            assert status == 0, err
            status, live, err = await cli("amq-route", "route", "map", f"localhost:{node.port}")
            assert status == 0, err
            assert offline == unstated(live)  # the file plans no states
            maps.append(live)
        assert f"localhost:{ports[3]} <=> localhost:{ports[2]}" in maps[0]
        assert (
            f"localhost:{ports[0]}(ex=amq.topic) <= localhost:{ports[1]}(ex=amq.topic) key=global.#"
            in maps[1]
        )

        status, out, _ = await cli("amq-route", "topology", "map", file, "--live")
        while "down" in out:  # the links are still connecting
            await trio.sleep(0.2)
            status, out, _ = await cli("amq-route", "topology", "map", file, "--live")
        assert status == 0, out
        assert out.rstrip().endswith(f"No drift: the live nodes match {file}.")

        status, out, _ = await cli("amq-route", "topology", "apply", file)
        assert (status, out) == (0, f"No changes. The live nodes match {file}.\n")

        brokers[1].kill()  # broker2: broker1's link to it goes down
        status, out, _ = await cli("amq-route", "topology", "map", file, "--live")
        while "down (" not in out:
            await trio.sleep(0.2)
            status, out, _ = await cli("amq-route", "topology", "map", file, "--live")
        assert status == 1
        assert "not read" in out
        assert "Drift:" in out.splitlines()[-1]

        # Every format of the live map, marked the same way (these used to print the text map).
        report = tmp_path / "live.json"
        status, out, _ = await cli(
            "amq-route", "topology", "map", file, "--live", "--format", "json", "-o", str(report)
        )
        assert (status, out) == (1, f"wrote {report}\n")
        document = json.loads(report.read_text())
        assert [node["read"] for node in document["nodes"]] == [True, False, True, True]
        assert any(link["marker"].startswith("down (") for link in document["links"])
        status, dot, _ = await cli("amq-route", "topology", "map", file, "--live", "--format", "dot")
        assert status == 1
        assert dot.startswith("digraph") and "NOT READ: " in dot and "DOWN (" in dot
        picture = tmp_path / "live.png"
        status, out, _ = await cli(
            "amq-route", "topology", "map", file, "--live", "--format", "png", "-o", str(picture)
        )
        if shutil.which("dot"):
            assert (status, out) == (1, f"wrote {picture}\n")
            assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_check_lists_findings_and_exits_1_on_errors(tmp_path: Path) -> None:
    topology = tmp_path / "wrong.toml"
    topology.write_text(
        '[nodes.a]\nhost = "127.0.0.1"\nport = 5999\n\n'
        '[[routes]]\nkind = "dynamic"\nfrom = "a"\nto = "nowhere"\nexchange = "fed.topic"\n'
    )
    with trio.fail_after(30):
        status, out, err = await cli("amq-route", "topology", "check", str(topology))
        assert status == 1, err
        assert f"{topology}:5: routes[0]: error [unknown-node]" in out
        assert out.splitlines()[-1].startswith(f"{topology}: ") and "error(s)" in out.splitlines()[-1]
        for command in ("map", "plan", "apply"):
            status, out, err = await cli("amq-route", "topology", command, str(topology))
            assert (status, out) == (1, "")
            assert "error(s) found; `amq-route topology check" in err


async def test_check_of_a_clean_file_prints_the_totals_alone(tmp_path: Path) -> None:
    """No findings, no lines before the totals (a blank one was printed when the listing of
    findings became one joined string)."""
    topology = tmp_path / "one.toml"
    topology.write_text('[nodes.a]\nhost = "127.0.0.1"\nport = 5999\n')
    with trio.fail_after(30):
        status, out, err = await cli("amq-route", "topology", "check", str(topology))
    assert (status, out) == (0, f"{topology}: 0 error(s), 0 warning(s), 0 note(s)\n"), err


async def test_check_lists_20_warnings_of_a_code_and_all_of_them_with_all(tmp_path: Path) -> None:
    """A chain of 25 linked nodes has 24 bridges and 23 single points of failure: `check`
    prints 20 of each and a line counting the others (naming --all), `check --all` every one
    and no count line; the totals are the same."""
    names = [f"n{index:02d}" for index in range(25)]
    topology = tmp_path / "chain.toml"
    nodes = "".join(f'[nodes.{n}]\nhost = "127.0.0.1"\nport = {6000 + i}\n\n' for i, n in enumerate(names))
    links = "".join(
        f'[[links]]\nfrom = "{a}"\nto = "{b}"\n\n' for a, b in zip(names, names[1:], strict=False)
    )
    topology.write_text(nodes + links)
    with trio.fail_after(30):
        status, some, err = await cli("amq-route", "topology", "check", str(topology))
        assert status == 0, err
        status, every, err = await cli("amq-route", "topology", "check", "--all", str(topology))
        assert status == 0, err
    assert some.count("[bridge]") == 21 and every.count("[bridge]") == 24
    assert some.count("[single-point-of-failure]") == 21 and every.count("[single-point-of-failure]") == 23
    counts = [line for line in some.splitlines() if line.startswith("... and ")]
    assert counts == [
        f"... and {more} more warning(s) [{code}] like these; `amq-route topology check --all {topology}` lists every one"
        for more, code in ((3, "single-point-of-failure"), (4, "bridge"))
    ]
    assert "... and" not in every
    assert set(some.splitlines()) - set(counts) < set(every.splitlines())
    assert (
        some.splitlines()[-1] == every.splitlines()[-1] == f"{topology}: 0 error(s), 47 warning(s), 0 note(s)"
    )


async def test_a_file_that_does_not_load_is_one_line_per_problem(tmp_path: Path) -> None:
    topology = tmp_path / "typo.toml"
    topology.write_text('[nodes.a]\nhost = "127.0.0.1"\nport = "many"\n')
    with trio.fail_after(30):
        status, out, err = await cli("amq-route", "topology", "check", str(topology))
    assert (status, out) == (1, "")
    assert err.startswith(f"{topology}:3: nodes.a.port: ")
    assert "Traceback" not in err


async def test_map_formats(tmp_path: Path) -> None:
    pair = str(CONFIGS / "topology-pair.toml")
    with trio.fail_after(60):
        status, out, _ = await cli("amq-route", "topology", "map", pair, "--format", "json")
        assert status == 0 and out.lstrip().startswith("{")
        status, out, _ = await cli("amq-route", "topology", "map", pair, "--format", "dot")
        assert status == 0 and "digraph" in out
        picture = tmp_path / "pair.png"
        status, out, err = await cli(
            "amq-route", "topology", "map", pair, "--format", "png", "-o", str(picture)
        )
        assert status == 0, err
        assert out == f"wrote {picture}\n"
        assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
async def test_a_png_without_o_goes_to_the_working_directory(tmp_path: Path) -> None:
    """Not beside the file: configs/ (or a shared folder) is not where pictures belong."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [
                str(BIN / "amq-route"),
                "topology",
                "map",
                str(CONFIGS / "topology-pair.toml"),
                "--format",
                "png",
            ],
            cwd=tmp_path,
            capture_stdout=True,
            check=False,
        )
    assert (result.returncode, result.stdout) == (0, b"wrote topology-pair.png\n")
    assert (tmp_path / "topology-pair.png").read_bytes().startswith(b"\x89PNG")
    assert not (CONFIGS / "topology-pair.png").exists()
