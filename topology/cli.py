"""`amq-route topology check|map|plan|apply FILE`: the planner on the command line.

The commands hang under amq-route (they speak to the same nodes, with the same global options
such as --timeout) but live here, beside the planner they drive; gateway.cli mounts them. A file that does not load is
one error line per problem on stderr and exit 1; map, plan and apply refuse a file the checks
find errors in (topology.prepare).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from federation.management_client import EXIT_FAILED
from topology.apply import apply_plan
from topology.checks import has_errors, run_checks
from topology.live import read_live
from topology.model import Finding
from topology.plan import plan_topology
from topology.prepare import Refused, load, load_checked
from topology.render import RenderError, render_dot, render_json, render_png
from topology.render_live import render_live_dot, render_live_json, render_live_png
from topology.routemap import compare_views, expected_views, mark_live, offline_map

FORMATS = ("text", "json", "dot", "png")
#: Warnings or notes of one code `check` lists before it counts the rest (without --all): a
#: 10,000-node hierarchy has 9,999 bridges. Errors are always listed, every one.
LISTED_PER_CODE = 20


def findings_summary(findings: list[Finding]) -> str:
    counts = {
        severity: sum(f.severity == severity for f in findings) for severity in ("error", "warning", "info")
    }
    return f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def check(context: Any, args: argparse.Namespace) -> int:
    """The findings, one per line, then the totals; exit 1 if any is an error."""
    topology = load(args.file)
    findings = run_checks(topology)
    for line in listed(findings, None if args.all else LISTED_PER_CODE, args.file):
        print(line)
    print(f"{args.file}: {findings_summary(findings)}")
    return EXIT_FAILED if has_errors(findings) else 0


def listed(findings: list[Finding], per_code: int | None, file: Path) -> list[str]:
    """A line per finding; past `per_code` warnings or notes of one code, one line that counts
    the rest of them (every error is listed; per_code None lists everything)."""
    seen: dict[str, int] = {}
    lines = []
    for finding in findings:
        seen[finding.code] = seen.get(finding.code, 0) + 1
        if per_code is None or finding.severity == "error" or seen[finding.code] <= per_code:
            lines.append(str(finding))
    severity = {finding.code: finding.severity for finding in findings}
    for code, count in seen.items():
        if per_code is not None and severity[code] != "error" and count > per_code:
            lines.append(
                f"... and {count - per_code:,} more {severity[code]}(s) [{code}] like these; "
                f"`amq-route topology check --all {file}` lists every one"
            )
    return lines


async def draw(context: Any, args: argparse.Namespace) -> int:
    """The file's route map: text (as `route map` prints it), JSON, DOT or a PNG picture; with
    --live, the same formats marked against what the nodes really hold (exit 1 on any drift)."""
    topology = load_checked(args.file, warn)
    start = args.start
    if start is not None and start not in topology.nodes:
        raise Refused(f"--from {start}: no node of that name in {args.file}")
    if not args.live:
        if args.format == "png":
            return _write_png(args, "", lambda output: render_png(topology, output))
        if args.format == "text":
            return _emit(args, "\n".join(offline_map(topology, start)))
        return _emit(args, render_json(topology) if args.format == "json" else render_dot(topology))
    state = await read_live(topology, context.options.timeout)
    expected = expected_views(topology)
    marks = mark_live(topology, expected, state.views())
    if args.format == "png":
        _write_png(args, "-live", lambda output: render_live_png(topology, marks, output))
    elif args.format == "text":
        _emit(args, "\n".join(compare_views(topology, expected, state.views()).lines))
    else:
        _emit(args, (render_live_json if args.format == "json" else render_live_dot)(topology, marks))
    return EXIT_FAILED if marks.drift else 0


def _emit(args: argparse.Namespace, text: str) -> int:
    """Print `text`, or write it to -o and say so."""
    if args.output:
        args.output.write_text(text + "\n")
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def _write_png(args: argparse.Namespace, suffix: str, draw: Callable[[Path], None]) -> int:
    """Draw into -o or, by default, FILE's name with `suffix` and .png in the working directory
    (not beside the file, which may be in a read-only or shared folder)."""
    output = args.output or Path(f"{args.file.stem}{suffix}.png")
    try:
        draw(output)
    except RenderError as error:
        raise Refused(str(error)) from None
    print(f"wrote {output}")
    return 0


async def plan(context: Any, args: argparse.Namespace) -> int:
    """What apply would do; exit 1 if a node could not be read, else 0 (with
    --detailed-exitcode, 2 when apply would change something or cannot, as terraform's)."""
    topology = load_checked(args.file, warn)
    result = await plan_topology(topology, prune=args.prune, timeout=context.options.timeout)
    print("\n".join(result.lines()))
    if not result.complete:
        return EXIT_FAILED
    return 2 if args.detailed_exitcode and (result.changes or result.errors) else 0


async def apply(context: Any, args: argparse.Namespace) -> int:
    """Make the live nodes match the file; a second run changes nothing and says so. Exit 1
    when a node could not be read, refused a request, or differences apply cannot make remain."""
    topology = load_checked(args.file, warn)
    result = await plan_topology(topology, prune=args.prune, timeout=context.options.timeout)
    if not result.complete:
        print("\n".join(result.lines()))
        return EXIT_FAILED
    applied = await apply_plan(result, say=print)
    if not applied.ok:
        print(f"Apply incomplete: {applied.applied} of {len(result.changes)} change(s) made.")
        raise Refused(applied.failure)
    if result.changes or result.drift:
        print(f"Apply complete: {applied.applied} change(s) made.")
    if result.kept:
        print(f"{len(result.kept)} object(s) not in the file kept: apply --prune deletes them.")
    return 0


Command = Callable[[Any, argparse.Namespace], Awaitable[int]]


def refusing(handler: Command) -> Command:
    """`handler`, with Refused printed on stderr as exit status 1."""

    async def run(context: Any, args: argparse.Namespace) -> int:
        try:
            return await handler(context, args)
        except Refused as refusal:
            warn(str(refusal))
            return EXIT_FAILED

    return run


def add_commands(command: Callable[[str, Command, str], argparse.ArgumentParser]) -> None:
    """The topology commands, made by amq-route's own `command(name, handler, help)` so they
    take its global options."""

    def with_file(leaf: argparse.ArgumentParser) -> argparse.ArgumentParser:
        leaf.add_argument(
            "file", type=Path, metavar="FILE", help="topology file (TOML; see docs/topology.md)"
        )
        return leaf

    leaf = with_file(
        command(
            "check", refusing(check), "check a topology file: references, loops, reachability, resilience"
        )
    )
    leaf.add_argument(
        "--all",
        action="store_true",
        help=f"list every finding (default: past {LISTED_PER_CODE} warnings or notes of one code, a count)",
    )
    leaf = with_file(
        command("map", refusing(draw), "the route map a topology file makes, offline or against live nodes")
    )
    leaf.add_argument("--format", choices=FORMATS, default="text", help="text (default), json, dot or png")
    leaf.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="write here (png: default ./NAME.png, ./NAME-live.png)",
    )
    leaf.add_argument("--from", dest="start", metavar="NODE", help="node the text map's walk starts at")
    leaf.add_argument("--live", action="store_true", help="mark what the live nodes miss, add or have down")
    for name, handler, text in (
        ("plan", plan, "show what apply would create, change and delete on the live nodes"),
        ("apply", apply, "make the live nodes match the file"),
    ):
        leaf = with_file(command(name, refusing(handler), text))
        leaf.add_argument("--prune", action="store_true", help="also delete what the file does not declare")
        if name == "plan":
            leaf.add_argument(
                "--detailed-exitcode", action="store_true", help="exit 2 when there are changes (0: none)"
            )
