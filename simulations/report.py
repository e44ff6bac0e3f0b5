"""`amq-sim report DIR`: report.html next to a run's tables, with PNG plots drawn by
matplotlib: the busiest links, backlog over time, the delay distribution per region, and the
topology coloured by load. It reads only the tables, so it reports on either engine's run."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from simulations.tables import read, summary  # noqa: E402

#: Links shown in the bar chart, and in the backlog plot.
BUSIEST = 15
BACKLOGGED = 6
#: Nodes the topology plot draws at most: past this only the busiest links and their ends (a
#: spring layout of thousands of nodes is a blot, and networkx needs scipy past 500 nodes).
DRAWN_NODES = 300


def write_report(out: Path) -> Path:
    """Draw the plots and write `out`/report.html; its path."""
    links, nodes, delays = read(out, "links"), read(out, "nodes"), read(out, "delays")
    plots = {
        "busiest-links.png": _busiest(links),
        "backlog.png": _backlog(links),
        "delays.png": _delays(delays),
        "topology.png": _topology(links, nodes),
    }
    for name, figure in plots.items():
        figure.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(figure)
    totals = summary(out)
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(f'{v:,}' if isinstance(v, int) else str(v))}</td></tr>"
        for k, v in totals.items()
    )
    images = "".join(f'<h2>{html.escape(name[:-4])}</h2><img src="{name}" alt="{name}">' for name in plots)
    page = out / "report.html"
    page.write_text(
        f"<!doctype html><meta charset=utf-8><title>amq-sim: {html.escape(out.name)}</title>"
        f"<h1>amq-sim run {html.escape(out.name)}</h1><table>{rows}</table>{images}\n"
    )
    return page


def _busiest(links: pd.DataFrame) -> plt.Figure:
    totals = links.groupby("link")["messages"].sum().sort_values(ascending=False).head(BUSIEST)
    figure, axes = plt.subplots(figsize=(8, 0.35 * len(totals) + 1.5))
    axes.barh(totals.index[::-1], totals.values[::-1], color="tab:blue")
    axes.set_xlabel("messages over the run")
    axes.set_title("Busiest links")
    return figure


def _backlog(links: pd.DataFrame) -> plt.Figure:
    worst = links.groupby("link")["backlog"].max().sort_values(ascending=False)
    worst = worst[worst > 0].head(BACKLOGGED)
    figure, axes = plt.subplots(figsize=(8, 4))
    for link in worst.index:
        rows = links[links["link"] == link].sort_values("step")
        axes.plot(rows["step"], rows["backlog"], label=link)
    if len(worst):
        axes.legend(fontsize="small")
    axes.set_xlabel("step")
    axes.set_ylabel("backlog (messages)")
    axes.set_title("Backlog over time" + ("" if len(worst) else " (no link backlogged)"))
    return figure


def _delays(delays: pd.DataFrame) -> plt.Figure:
    """Cumulative share of deliveries by delay, one line per region of the subscriber."""
    figure, axes = plt.subplots(figsize=(8, 4))
    for region, rows in delays.groupby("region"):
        rows = rows.groupby("delay_ms")["messages"].sum().sort_index()
        axes.step(
            np.maximum(rows.index, 1), rows.cumsum() / rows.sum(), where="post", label=str(region) or "-"
        )
    axes.set_xscale("log")
    axes.set_xlabel("delay (ms, log scale; 0 shown as 1)")
    axes.set_ylabel("share of deliveries")
    axes.set_title("Delay distribution per region")
    if len(delays):
        axes.legend(fontsize="small")
    return figure


def _topology(links: pd.DataFrame, nodes: pd.DataFrame) -> plt.Figure:
    load = links.groupby(["source", "destination"])["messages"].sum()
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(nodes["node"])
    for (source, destination), messages in load.items():
        previous = graph.get_edge_data(source, destination, {"load": 0})["load"]
        graph.add_edge(source, destination, load=previous + int(messages))
    title = "Topology coloured by load (nodes: published + received)"
    if len(graph) > DRAWN_NODES:
        links_in_all, graph = graph.number_of_edges(), busiest_part(graph)
        title = (
            f"The {graph.number_of_edges():,} busiest links of {links_in_all:,}, coloured by load\n"
            "(nodes: published + received)"
        )
    figure, axes = plt.subplots(figsize=(8, 8))
    positions = nx.spring_layout(graph, seed=1)
    weights = [graph.edges[e]["load"] for e in graph.edges]
    received = nodes.set_index("node")["received"] + nodes.set_index("node")["published"]
    nx.draw_networkx_nodes(
        graph,
        positions,
        ax=axes,
        node_size=30 if len(graph) > 100 else 120,
        node_color=[received.get(n, 0) for n in graph.nodes],
        cmap="viridis",
    )
    colours = plt.cm.ScalarMappable(
        cmap="plasma", norm=plt.Normalize(min(weights, default=0), max(weights, default=1))
    )
    nx.draw_networkx_edges(
        graph, positions, ax=axes, edge_color=weights, edge_cmap=plt.get_cmap("plasma"), width=1.5
    )
    if len(graph) <= 40:
        nx.draw_networkx_labels(graph, positions, ax=axes, font_size=8)
    if weights:
        figure.colorbar(colours, ax=axes, label="messages over the link (both directions)", shrink=0.6)
    axes.set_title(title)
    axes.axis("off")
    return figure


def busiest_part(graph: nx.Graph[str]) -> nx.Graph[str]:
    """The busiest links, busiest first, for as long as their ends number DRAWN_NODES at most."""
    kept: set[str] = set()
    for source, destination, _ in sorted(graph.edges(data="load"), key=lambda e: (-e[2], e[0], e[1])):
        if len(kept | {source, destination}) > DRAWN_NODES:
            break
        kept |= {source, destination}
    return graph.subgraph(kept or sorted(graph)[:DRAWN_NODES]).copy()
