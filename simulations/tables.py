"""The tables a run writes (Parquet, one directory each under --out), their columns, and the
terminal summary read back from them. docs/simulation.md describes every column; both engines
write exactly these, so their outputs compare row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: table -> its columns, (name, Spark SQL type); the first `KEYS[table]` columns identify a row.
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "links": (
        ("link", "string"),
        ("step", "bigint"),
        ("source", "string"),
        ("destination", "string"),
        ("messages", "bigint"),
        ("bytes", "bigint"),
        ("lost", "bigint"),
        ("lost_in_flight", "bigint"),
        ("dropped", "bigint"),
        ("down", "boolean"),
        ("capacity", "bigint"),
        ("backlog", "bigint"),
        ("backlog_bytes", "bigint"),
        ("delay_ms", "bigint"),
    ),
    "nodes": (
        ("node", "string"),
        ("region", "string"),
        ("published", "bigint"),
        ("refused", "bigint"),
        ("unrouted", "bigint"),
        ("sent", "bigint"),
        ("received", "bigint"),
        ("delivered", "bigint"),
    ),
    "queues": (
        ("node", "string"),
        ("queue", "string"),
        ("delivered", "bigint"),
        ("duplicates", "bigint"),
        ("lost", "bigint"),
        ("delayed", "bigint"),
        ("max_hops", "bigint"),
        ("total_delay_ms", "bigint"),
    ),
    "delays": (
        ("node", "string"),
        ("queue", "string"),
        ("hops", "bigint"),
        ("delay_ms", "bigint"),
        ("region", "string"),
        ("messages", "bigint"),
    ),
    "exchanges": (
        ("node", "string"),
        ("exchange", "string"),
        ("published", "bigint"),
        ("dropped_looping", "bigint"),
    ),
}
KEYS = {"links": 2, "nodes": 1, "queues": 2, "delays": 4, "exchanges": 2}


def key_columns(table: str) -> list[str]:
    return [name for name, _ in COLUMNS[table][: KEYS[table]]]


def normalised(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Columns in order, integer columns as int64, rows sorted by the key: how two engines'
    tables are compared."""
    frame = frame[[name for name, _ in COLUMNS[table]]].copy()
    for name, kind in COLUMNS[table]:
        if kind == "bigint":
            frame[name] = frame[name].astype("int64")
        elif kind == "boolean":
            frame[name] = frame[name].astype(bool)
        else:
            frame[name] = frame[name].astype(str)
    return frame.sort_values(key_columns(table)).reset_index(drop=True)


def write_frame(table: str, frame: pd.DataFrame, out: Path) -> None:
    """A pandas table as a Parquet directory shaped like Spark's (one part file)."""
    folder = out / table
    folder.mkdir(parents=True, exist_ok=True)
    normalised(table, frame).to_parquet(folder / "part-00000.parquet", index=False)


def read(out: Path, table: str, columns: list[str] | None = None) -> pd.DataFrame:
    return pd.read_parquet(out / table, columns=columns)


def summary(out: Path) -> dict[str, Any]:
    """The run's totals, read back from its tables (whichever engine wrote them)."""
    nodes = pq.read_table(out / "nodes", columns=["published", "refused", "unrouted"])
    queues = pq.read_table(out / "queues", columns=["delivered", "duplicates", "lost", "delayed"])
    links = pq.read_table(
        out / "links", columns=["link", "lost", "lost_in_flight", "dropped", "backlog", "messages"]
    )

    def total(table: Any, column: str) -> int:
        value = pc.sum(table[column]).as_py()
        return int(value or 0)

    # Ties go to the first link by name, so both engines' summaries name the same one.
    busiest = (
        links.group_by("link")
        .aggregate([("messages", "sum")])
        .sort_by([("messages_sum", "descending"), ("link", "ascending")])
    )
    return {
        "published": total(nodes, "published"),
        "refused": total(nodes, "refused"),
        "unrouted": total(nodes, "unrouted"),
        "delivered": total(queues, "delivered"),
        "duplicates": total(queues, "duplicates"),
        "lost": total(queues, "lost"),
        "delayed": total(queues, "delayed"),
        "lost_on_links": total(links, "lost") + total(links, "lost_in_flight"),
        "dropped_on_links": total(links, "dropped"),
        "max_backlog": int(pc.max(links["backlog"]).as_py() or 0) if links.num_rows else 0,
        "links": busiest.num_rows,
        "busiest_link": busiest["link"][0].as_py() if busiest.num_rows else "-",
        "busiest_messages": int(busiest["messages_sum"][0].as_py()) if busiest.num_rows else 0,
    }


def summary_lines(name: str, engine: str, seconds: float, out: Path) -> list[str]:
    """The terminal summary of a finished run."""
    s = summary(out)
    return [
        f"scenario {name} ({engine} engine, {seconds:.1f} s)",
        f"  published      {s['published']:>14,}",
        f"  delivered      {s['delivered']:>14,}",
        f"  duplicates     {s['duplicates']:>14,}",
        f"  refused        {s['refused']:>14,}  (publishes to a node that was down)",
        f"  unrouted       {s['unrouted']:>14,}  (published, reached no queue)",
        f"  lost           {s['lost']:>14,}  (deliveries lost behind a transient link that was down, or dropped where held)",
        f"  delayed        {s['delayed']:>14,}  (buffered by a durable link that was down)",
        f"  lost on links  {s['lost_on_links']:>14,}",
        f"  dropped held   {s['dropped_on_links']:>14,}  (held by a link that was down: full queue, TTL, node killed)",
        f"  links used     {s['links']:>14,}",
        f"  busiest link   {s['busiest_link']} ({s['busiest_messages']:,} messages)",
        f"  max backlog    {s['max_backlog']:>14,}  messages",
        f"tables: {out}/{{links,nodes,queues,delays,exchanges}} (Parquet); report: amq-sim report {out}",
    ]
