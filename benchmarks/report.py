"""Turn a results dict into docs/benchmarks.md and benchmarks/results/latest.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import sections
from .fanout import FANOUT, FANOUT_SCENARIOS, LOCAL
from .federation import FEDERATION_SCENARIOS, LINK_CREDIT, MAX_HOPS, FederationScenario
from .load import LINGER_S
from .scenarios import SCENARIOS, Scenario

NAMES = {"rabbitmq": "RabbitMQ", "gateway": "amq-gateway"}
# From ../shared/notes/baseline-rabbitmq.md: RabbitMQ 3.10.8 with the C client on these
# machines. Shown so a reader can tell whether the load tool held RabbitMQ back.
C_CLIENT_ANCHOR = {
    "transient": "107,000 msg/s",
    "confirms": "87,000 msg/s",
    "topic": "69,500 msg/s",
    "paced": "p50 0.21 ms / p99 0.79 ms",
}
# Issue 2's targets, as minimum gateway / RabbitMQ msg/s ratios.
TARGETS = {"transient": 0.5, "persistent": 1.0}
# Issue 3's: at least RabbitMQ's federated rate, on every federation scenario.
FEDERATION_TARGET = 1.0


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _result(results: dict[str, Any], broker: str, key: str, suite: str = "brokers") -> dict[str, Any] | None:
    """A scenario's figures if that broker ran it successfully."""
    entry = results[suite][broker]
    found = entry.get("scenarios", {}).get(key)
    return found if found and found["ok"] else None


def _why_not(entry: dict[str, Any], key: str) -> str:
    """Why a broker has no figures for a scenario, short enough for a table cell."""
    found = entry.get("scenarios", {}).get(key)
    if found is None:
        why = f"not measured ({entry['note'].splitlines()[0]})" if entry.get("note") else "not measured"
    elif found.get("measured", True):
        why = f"failed: {found['error']}"
    else:
        why = f"not measured: {found['error']}"
    return why.replace("|", "/").replace("\n", " ")[:120]


def _ratio(gw: dict[str, Any] | None, rmq: dict[str, Any] | None, field: str) -> str:
    if gw is None or rmq is None or not rmq[field]:
        return "—"
    return f"{gw[field] / rmq[field]:.2f}"


def _cells(entry: dict[str, Any], r: dict[str, Any] | None, key: str) -> list[str]:
    if r is not None:
        return [
            f"{r['msg_per_s']:,.0f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['broker_cpu_s']:.2f}",
            f"{r['peak_rss_mb']:.0f}",
        ]
    return [_why_not(entry, key), "", "", "", ""]


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    lines = [
        f"- CPUs: {m['nproc']} × {m['cpu_model']}; Linux {m['kernel']}; "
        f"load average at start {' '.join(m['loadavg_at_start'])}",
        f"- Python {m['python']} (load tool and amq-gateway)",
    ]
    for broker, entry in results["brokers"].items():
        ran = next((e for e in (entry, results["federation"][broker]) if e["status"] == "ran"), None)
        if ran is not None:
            s = ran["server"]
            detail = " ".join(v for v in (s.get("product"), s.get("version")) if v)
            platform = f" on {s['platform']}" if s.get("platform") else ""
            lines.append(f"- {NAMES[broker]}: {detail}{platform}")
        else:
            lines.append(f"- {NAMES[broker]}: not measured ({entry['note'].splitlines()[0]})")
    return lines


def _federation_rows(results: dict[str, Any], s: FederationScenario) -> list[list[str]]:
    rmq, gw = (_result(results, b, s.key, "federation") for b in ("rabbitmq", "gateway"))
    rows = []
    for broker, r in (("rabbitmq", rmq), ("gateway", gw)):
        suite = results["federation"][broker]
        found = suite.get("scenarios", {}).get(s.key, {})
        route = found.get("route", "")
        if r is not None:
            cells = [f"{r['msg_per_s']:,.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"]
        else:
            cells = [_why_not(suite, s.key), "", ""]
        counted = f"{found['lost']} / {found['duplicated']}" if "lost" in found else ""
        ratio = _ratio(gw, rmq, "msg_per_s") if broker == "gateway" else ""
        rows.append([s.title, NAMES[broker], route, *cells, counted, ratio])
    return rows


def _fanout(results: dict[str, Any]) -> list[str]:
    """The fanout federation section: method, table, and the ratio to local publishing."""
    suite = results.get("fanout", {"status": "skipped", "note": "not in this run's results"})
    st = results["settings"]
    rows = []
    for s in FANOUT_SCENARIOS:
        found = suite.get("scenarios", {}).get(s.key, {})
        r = found if found.get("ok") else None
        cells = (
            [f"{r['msg_per_s']:,.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"]
            if r
            else [_why_not(suite, s.key), "", ""]
        )
        counted = f"{found['lost']} / {found['duplicated']}" if "lost" in found else ""
        rows.append([s.title, *cells, counted])
    local, fanout = (suite.get("scenarios", {}).get(s.key) for s in (LOCAL, FANOUT))
    ratio = (
        f"{fanout['msg_per_s'] / local['msg_per_s']:.2f}"
        if local and fanout and local.get("ok") and fanout.get("ok")
        else "—"
    )
    return [
        "## Fanout federation (OpenAMQ types)",
        "",
        "- amq-gateway only: a parent P and two children C1 and C2 started with `--attach P "
        f"--attach-all {FANOUT.exchange}`, so that topic exchange, declared on all three with "
        "`amq-config`, is federated as fanout on both children. "
        f"{st['messages']:,} messages of {st['body_bytes']} bytes are published on C1 with publisher "
        f"confirms ({st['confirm_window']} in flight) and consumed on C2: C1's outbox, P, C2's queue "
        "on P (its mirrored binding), then C2's exchange. Lost / duplicated, probes and medians as "
        "above.",
        "- Baseline, same run, same load: publish to and consume from a plain topic exchange on P "
        "alone. RabbitMQ has no such federation type.",
        "",
        *_table(["scenario", "msg/s", "p50 ms", "p99 ms", "lost / duplicated"], rows),
        "",
        f"Fanout federation / local publishing, msg/s: {ratio}",
    ]


def _federation(results: dict[str, Any]) -> list[str]:
    """The Federation section: method, table, target verdicts, and which route kind ran."""
    st = results["settings"]
    rows = [row for s in FEDERATION_SCENARIOS for row in _federation_rows(results, s)]
    targets = []
    for s in FEDERATION_SCENARIOS:
        got = _ratio(
            _result(results, "gateway", s.key, "federation"),
            _result(results, "rabbitmq", s.key, "federation"),
            "msg_per_s",
        )
        verdict = "—" if got == "—" else ("met" if float(got) >= FEDERATION_TARGET else "NOT met")
        targets.append(f"- {s.title}: gateway / RabbitMQ msg/s ≥ {FEDERATION_TARGET}: {got} ({verdict})")
    refused = {
        found["dynamic_refused"]
        for found in results["federation"]["gateway"].get("scenarios", {}).values()
        if "dynamic_refused" in found
    }
    fallback = [
        "",
        "amq-gateway ran exchange routes (`amq-route route add <next> <previous> <exchange> "
        "<key>`) instead of dynamic routes, because `amq-route dynamic add` answered: "
        + "; ".join(f"`{why}`" for why in sorted(refused)),
    ]
    return [
        "## Federation",
        "",
        f"- Three nodes of each broker side by side (A, B, C), the brokers one after the other. "
        f"{st['messages']:,} messages of {st['body_bytes']} bytes published on A with publisher "
        f"confirms ({st['confirm_window']} in flight) and consumed on B (one hop) or C (two hops, "
        "through B) by the same load tool; msg/s and latency as above; "
        f"the run with the median rate out of {st['repeat']} is shown.",
        "- Every body carries a sequence number: the consumer counts messages lost and messages "
        f"duplicated (or foreign to the run), listening {LINGER_S} s past the last expected one; "
        "anything but 0 / 0 fails the run.",
        "- A run starts once a probe message published on A has reached the consumer's queue, "
        "which is then purged: links and bindings come up asynchronously.",
        "- RabbitMQ: exchange federation plugin on the downstream nodes, each with the previous "
        f"node as its upstream (ack-mode on-confirm, prefetch-count {LINK_CREDIT}, max-hops "
        f"{MAX_HOPS}) and a policy federating the scenario's exchange; `rabbitmqctl "
        "set_cluster_name` on each downstream node.",
        "- amq-gateway: `amq-config -a <node> add exchange topic <exchange>` on every node, "
        f"then per hop `amq-route --credit {LINK_CREDIT} dynamic add <next> <previous> "
        "<exchange>`, and the run waits until `amq-route link list <next>` shows Operational.",
        "",
        *_table(
            [
                "scenario",
                "broker",
                "route",
                "msg/s",
                "p50 ms",
                "p99 ms",
                "lost / duplicated",
                "msg/s gateway / RabbitMQ",
            ],
            rows,
        ),
        *(fallback if refused else []),
        "",
        "### Targets (issue 3)",
        "",
        "gateway ≥ RabbitMQ federation (about 19,000 msg/s here with the cluster name set); "
        "ratios to the RabbitMQ figures of this run:",
        "",
        *targets,
    ]


def _tool_row(results: dict[str, Any], s: Scenario) -> list[str]:
    """C-client anchor vs this tool against RabbitMQ, and the tool's own CPU use."""
    r = _result(results, "rabbitmq", s.key)
    if r is None:
        return [s.title, C_CLIENT_ANCHOR.get(s.key, "—"), "—", "—"]
    ours = (
        f"p50 {r['p50_ms']:.2f} ms / p99 {r['p99_ms']:.2f} ms" if s.rate else (f"{r['msg_per_s']:,.0f} msg/s")
    )
    cpu = f"{r['publisher_cpu_s']:.2f} + {r['consumer_cpu_s']:.2f} in {r['elapsed_s']:.2f}"
    return [s.title, C_CLIENT_ANCHOR.get(s.key, "—"), ours, cpu]


def render(results: dict[str, Any]) -> str:
    st = results["settings"]
    rows, ratio_rows, targets = [], [], []
    for s in SCENARIOS:
        rmq, gw = (_result(results, b, s.key) for b in ("rabbitmq", "gateway"))
        for broker, r in (("rabbitmq", rmq), ("gateway", gw)):
            ratio = _ratio(gw, rmq, "msg_per_s") if broker == "gateway" else ""
            rows.append([s.title, NAMES[broker], *_cells(results["brokers"][broker], r, s.key), ratio])
        ratio_rows.append(
            [
                s.title,
                *(
                    _ratio(gw, rmq, f)
                    for f in (
                        "msg_per_s",
                        "p50_ms",
                        "p99_ms",
                        "broker_cpu_us_per_msg",
                        "peak_rss_mb",
                    )
                ),
            ]
        )
        if s.key in TARGETS:
            got = _ratio(gw, rmq, "msg_per_s")
            verdict = "—" if got == "—" else ("met" if float(got) >= TARGETS[s.key] else "NOT met")
            targets.append(f"- {s.title}: gateway / RabbitMQ msg/s ≥ {TARGETS[s.key]}: {got} ({verdict})")
    tool_rows = [_tool_row(results, s) for s in SCENARIOS]
    lines = [
        "# Benchmarks: amq-gateway and RabbitMQ on the same machine",
        "",
        f"Generated by `benchmarks/` on {results['date']} ({results['duration_s']} s); "
        "rerun rather than edit:",
        "",
        f"    {results['command']}",
        "",
        "## Machine",
        "",
        *_machine(results),
        "",
        "## Method",
        "",
        f"- {st['messages']:,} messages of {st['body_bytes']} bytes per run; throughput "
        f"scenarios run {st['repeat']} times and the run with the median rate is shown; each run "
        f"is aborted and reported as failed after {st['timeout']:.0f} s.",
        "- One publisher process and one consumer process at the same time, on raw sockets with "
        "pre-encoded frames (`benchmarks/load.py`); consumer prefetch "
        f"{st['prefetch']}, multiple ack every {st['ack_every']}; with confirms at most "
        f"{st['confirm_window']} unconfirmed publishes in flight.",
        "- msg/s = messages / (last message consumed − publisher start). Latency = consumer "
        "receive time − send time carried in the body; in the throughput scenarios it includes "
        "queueing at full load, the paced run is the latency figure.",
        "- Every body carries a sequence number; a run that loses or duplicates a message fails.",
        "- Broker CPU s and peak RSS cover the broker's whole process tree during the run "
        "(RabbitMQ: the start script, beam.smp and its helpers), from /proc; the peak is reset "
        "before each run. The brokers run one after the other, each started fresh by the "
        "harness on spare loopback ports; our node with a data dir (SQLite).",
        "- Clients and broker share the machine's cores, as in the RabbitMQ baseline.",
        "",
        "## Results",
        "",
        *_table(
            [
                "scenario",
                "broker",
                "msg/s",
                "p50 ms",
                "p99 ms",
                "broker CPU s",
                "peak RSS MB",
                "msg/s gateway / RabbitMQ",
            ],
            rows,
        ),
        "",
        "### Ratios, gateway / RabbitMQ",
        "",
        "Above 1 is better for msg/s, worse for the others.",
        "",
        *_table(["scenario", "msg/s", "p50", "p99", "CPU per message", "peak RSS"], ratio_rows),
        "",
        "### Targets (issue 2)",
        "",
        *targets,
        "",
        *_federation(results),
        "",
        *_fanout(results),
        "",
        "## Is the load tool the bottleneck?",
        "",
        "RabbitMQ 3.10.8 driven by the C client (librabbitmq) on these machines, from the "
        "baseline note, against RabbitMQ driven by this tool in this run, and the CPU seconds "
        "the tool's publisher + consumer processes used during the run's elapsed seconds:",
        "",
        *_table(
            ["scenario", "C client (baseline note)", "this tool", "tool CPU s in elapsed s"],
            tool_rows,
        ),
    ]
    failures = [
        f"- {NAMES[b]}, {prefix}{r['title']}: {'' if r.get('measured', True) else 'not measured: '}{r['error']}"
        for suite, prefix in (("brokers", ""), ("federation", "federation, "))
        for b, e in results[suite].items()
        for r in e.get("scenarios", {}).values()
        if not r["ok"]
    ]
    if failures:
        lines += ["", "## Failed runs", "", *failures]
    return "\n".join(lines) + "\n"


def write_markdown(results: dict[str, Any], path: Path) -> None:
    """Write the report, keeping the sections `python -m benchmarks backlog` and `memory` put there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results) + (sections.kept(path.read_text()) if path.exists() else ""))
