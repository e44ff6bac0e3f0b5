"""What permission checks cost (issue 26 section 1: at most 3% of transient and topic throughput).

Two measurements, written to their own section of docs/benchmarks.md:

- Throughput: the `transient` and `topic` scenarios of `run`, on our node only, one round after
  another, each round starting a fresh node per variant in turn (each round starting with the
  next variant), so that the variants share the machine's moods: `before` (an amq-gateway executable built from the code before the
  checks, if `--before` names one), `full` (this code as the benchmark always runs it: guest
  with full permissions, which the check answers from one comparison) and `patterns` (this
  code with a users file restricting guest to patterns and a topic permission that allow the
  scenarios: every publish takes the cached path). Per variant: the median msg/s and broker CPU
  per message, and per round the ratio to the reference (`before`, else `full`).
- The check alone: `SessionAccess.publish` per call (min of repeats of a million calls), next to
  a method call that does nothing. On a shared machine this is the steadier figure: what the
  check adds to each publish, against the broker's CPU per message above.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import timeit
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from gateway.security.access import Authority, SessionAccess
from gateway.security.passwords import hash_password
from gateway.security.permissions import FULL, Permission, PermissionTable, TopicPermission

from . import brokers, sections
from .harness import run_once
from .scenarios import SCENARIOS

RESULTS_JSON = Path(__file__).parent / "results" / "permissions.json"
SCENARIO_KEYS = ("transient", "topic")
#: What guest may do in the `patterns` variant: the scenarios' own names, and nothing else.
CONFIGURE, WRITE, READ = r"^bench\.", r"^(bench\.|amq\.default$)", r"^bench\."
TOPIC = ("bench.topic.x", r"^bench\.", r"^bench\.")
USERS = f"""# python -m benchmarks permissions: guest restricted to the benchmark's names
[users.guest]
password = "{{hash}}"
tags = ["administrator"]

[users.guest.permissions."/"]
configure = '{CONFIGURE}'
write = '{WRITE}'
read = '{READ}'

[users.guest.topic_permissions."/"."{TOPIC[0]}"]
write = '{TOPIC[1]}'
read = '{TOPIC[2]}'
"""
CALLS = 1_000_000
NOTHING = "a method call that does nothing"
CALL_REPEATS = 15


def _session(restricted: bool) -> SessionAccess:
    table = PermissionTable()
    if restricted:
        table.set("guest", "/", Permission.of(CONFIGURE, WRITE, READ))
        table.set_topic("guest", "/", TopicPermission.of(*TOPIC))
    else:
        table.set("guest", "/", FULL)
    return Authority(table).session("guest", "/", {})


class _Nothing:
    def publish(self, exchange: str, exchange_type: str, routing_key: str) -> str | None:
        return None


def time_checks() -> dict[str, float]:
    """ns per `publish` check, by case (the no-op call includes the same calling overhead)."""
    cases: dict[str, tuple[Any, str, str, str]] = {
        NOTHING: (_Nothing(), "bench.x", "direct", "bench.transient"),
        "full permissions": (_session(False), "bench.x", "direct", "bench.transient"),
        "patterns, direct exchange (cached)": (_session(True), "bench.x", "direct", "bench.transient"),
        "patterns and a topic permission (cached)": (_session(True), *TOPIC[:1], "topic", "bench.500.key"),
    }
    timings = {}
    for name, (access, *arguments) in cases.items():
        check = partial(access.publish, *arguments)
        best = min(timeit.repeat(check, number=CALLS, repeat=CALL_REPEATS))
        timings[name] = best / CALLS * 1e9
    return timings


def run(gateway: Path, before: Path | None, rounds: int, messages: int, command: str) -> dict[str, Any]:
    variants: dict[str, tuple[Path, bool]] = {"full": (gateway, False), "patterns": (gateway, True)}
    if before is not None:
        variants = {"before": (before, False), **variants}
    scenarios = [s for s in SCENARIOS if s.key in SCENARIO_KEYS]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in variants}
    names = list(variants)
    for number in range(rounds):
        # Each round starts with the next variant, so none is always the first or last.
        for name in names[number % len(names) :] + names[: number % len(names)]:
            executable, restricted = variants[name]
            with tempfile.TemporaryDirectory(prefix=f"amq-bench-permissions-{name}-") as tmp:
                extra: list[str] = []
                if restricted:
                    users = Path(tmp) / "users.toml"
                    users.write_text(USERS.format(hash=hash_password("guest")))
                    extra = ["--users", str(users)]
                with brokers.gateway(Path(tmp), executable, extra=extra) as broker:
                    for s in scenarios:
                        result = run_once(broker, s, messages, 120.0)
                        runs[name].setdefault(s.key, []).append(result)
                        print(
                            f"round {number + 1}/{rounds} {name} {s.key}: {result['msg_per_s']:,.0f} msg/s",
                            flush=True,
                        )
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "rounds": rounds,
        "messages": messages,
        "runs": runs,
        "checks_ns": time_checks(),
    }


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))


def render(results: dict[str, Any]) -> str:
    begin, end = sections.MARKERS["permissions"]
    runs = results["runs"]
    reference = "before" if "before" in runs else "full"
    titles = {s.key: s.title for s in SCENARIOS}
    lines = [
        begin,
        "## What permission checks cost",
        "",
        f"`{results['command']}`, {results['date']}: {results['rounds']} rounds of {results['messages']:,}"
        " messages per scenario; in each round a fresh node per variant, one after another, the first"
        " variant rotating"
        " (benchmarks/permissions.py says what each variant is). Medians over the rounds; the"
        f" ratio is to `{reference}` in the same round.",
        "",
        f"| scenario | variant | msg/s | broker CPU µs/msg | msg/s / {reference} (median, range) |",
        "|---|---|---|---|---|",
    ]
    for key in SCENARIO_KEYS:
        base = runs[reference][key]
        for name, by_scenario in runs.items():
            measured = by_scenario[key]
            rates = [r["msg_per_s"] for r in measured]
            cpu = [r["broker_cpu_us_per_msg"] for r in measured]
            ratios = [r["msg_per_s"] / b["msg_per_s"] for r, b in zip(measured, base, strict=True)]
            shown = (
                ""
                if name == reference
                else f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"
            )
            lines.append(
                f"| {titles[key]} | {name} | {statistics.median(rates):,.0f} | {statistics.median(cpu):.2f} | {shown} |"
            )
    lines += ["", "The check alone, per publish (min of repeats of a million calls), against what the node"]
    lines += [f"spends per message in `{reference}` (the whole call counted: the code before made none):", ""]
    lines += ["| case | ns per call | share of the broker's CPU per message |", "|---|---|---|"]
    for name, ns in results["checks_ns"].items():
        key = "topic" if "topic" in name else "transient"
        per_message = statistics.median(r["broker_cpu_us_per_msg"] for r in runs[reference][key]) * 1000
        share = "" if name == NOTHING else f"{ns / per_message:.1%} of {per_message / 1000:.2f} µs ({key})"
        lines.append(f"| {name} | {ns:.0f} | {share} |")
    lines += ["", end, ""]
    return "\n".join(lines)


def write_markdown(results: dict[str, Any], path: Path) -> None:
    sections.put(path, "permissions", render(results))
