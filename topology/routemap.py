"""The route map a topology file makes, computed offline, and the file's map compared with the
live nodes' (`amq-route topology map FILE [--live]`).

`expected_views` is what each node's management would list once the topology is applied, as
`amq-route link add / dynamic add / route add / queue add / federate add` create them: the
records of `links.list`, `routes.list` and `federations.list`, shaped exactly as the node
returns them (federation.manager, federation.routes, federation.attachment), with every link
and peering Operational and every counter at zero. A link or route lives on the node that opens
its link (Route.holder); links are the declared ones plus those routes create for themselves
(Topology.effective_links), in that order, and a node lists its routes link by link, as
federation.manager does.

`offline_map` runs `route map`'s own walk (federation.routemap.MapWalk) over those views,
so the text is byte for byte what the live `amq-route route map <host:port>` prints after
apply: the same breadth-first order over link peers then federation parents, every probe "Ok",
and the nodes the walk never reaches left out as the live walk leaves them out.

`compare_views` lays the expected and the live views side by side in the map's own sections
(plus the links, which the map does not draw), marking each link, route and federation
`missing` (in the file, not live), `extra` (live, not in the file) or `down (<state>: <last
error>)` (a link or peering not Operational), and every node that could not be read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from federation import formatting
from federation.routemap import MapWalk, NodeView, link_endpoint
from federation.routes import DEFAULT_ACK, DEFAULT_CREDIT
from gateway.federation_config import DEFAULT_LOGIN
from topology.far_ends import FarEnd, FarEnds
from topology.model import GUEST, VHOST, Federation, Link, Node, Route, Topology

#: The state of a link or peering that is up.
OPERATIONAL = "Operational"
#: What federations.add gives a peering's outbox unless the child's config says otherwise.
OUTBOX_LIMIT = 100_000
OUTBOX_POLICY = "block"

Record = dict[str, Any]


# -- the records each node would list -------------------------------------------------------


def expected_views(topology: Topology) -> dict[str, NodeView]:
    """Per node (by name, in the file's order): the links, routes and federations its
    management would list once the topology is applied. Declarations naming a node the file
    does not declare, or a node as its own peer, are left out: apply could not create them
    (the checks report them)."""
    return {name: _view(topology, node) for name, node in topology.nodes.items()}


def _view(topology: Topology, node: Node) -> NodeView:
    peers = [
        link
        for link in topology.effective_links()
        if link.opener == node.name and link.peer in topology.nodes and link.peer != node.name
    ]
    links: list[formatting.Record] = [link_record(topology.nodes[link.peer], link) for link in peers]
    routes: list[formatting.Record] = []
    for link in peers:
        identities: set[tuple[Any, ...]] = set()
        for route in topology.routes:
            if route.holder != node.name or route.far_end != link.peer:
                continue
            record = route_record(topology, route)
            identity = (record["kind"], record["exchange"], record["key"], record["queue"])
            if identity not in identities:  # the node refuses a duplicate route
                identities.add(identity)
                routes.append(record)
    federations: list[formatting.Record] = []
    federated: set[str] = set()
    for federation in topology.federations:
        if federation.child != node.name or federation.parent not in topology.nodes:
            continue
        if federation.parent == node.name or federation.exchange in federated:
            continue  # refused by the node: itself, or an exchange federated twice
        federated.add(federation.exchange)
        federations.append(federation_record(topology, federation))
    # Nodes started from the file (`amq-gateway up`) are named as the file names them.
    return NodeView(links, routes, federations, node.name)


def link_record(peer: Node, link: Link) -> Record:
    """A links.list record of a link up to `peer` (federation.link.Link.snapshot), the peer
    named as the file names it: connected_since is unknown offline (None)."""
    return {
        "host": peer.host,
        "port": peer.port,
        "transport": link.transport,
        "durable": link.durable,
        "state": OPERATIONAL,
        "last_error": "",
        "node": peer.name,
        "connected_since": None,
        "reconnects": 0,
    }


def route_record(topology: Topology, route: Route) -> Record:
    """A routes.list record as the holder lists it (federation.routes.Route.record): the
    holder is named by its node name (the name `amq-gateway up` starts it with), the far end
    by `host:port`; a tag not given is the holder's tag from the file, if it sets one (else
    null: the node's name); ack and credit not given are the node's defaults."""
    holder = topology.nodes[route.holder]
    far_end = topology.nodes[route.far_end].endpoint
    tag = None if route.kind == "queue" else route.tag if route.tag is not None else holder.tag or None
    return {
        "kind": route.kind,
        "dest": far_end if route.push else holder.name,
        "src": holder.name if route.push else far_end,
        "exchange": route.exchange,
        "key": route.key if route.kind == "exchange" else None,
        "queue": route.queue if route.kind == "queue" else None,
        "tag": tag,
        "excludes": [] if route.kind == "queue" else list(route.excludes),
        "durable": route.durable,
        "src_local": route.push,
        "ack": route.ack or DEFAULT_ACK,
        "credit": route.credit or DEFAULT_CREDIT,
        "messages": 0,
        "bytes": 0,
        "in_flight": 0,
        "last_transfer": None,
        "last_error": "",
    }


def federation_record(topology: Topology, federation: Federation) -> Record:
    """A federations.list record as the child lists it (federation.attachment.Attachment.record):
    stored (durable, as the file's links and routes are by default), logging in to the parent
    with the credentials the file names for it, else with the child's attach login (the
    default one: `amq-gateway up` starts nodes without a [federation] section), the peering
    Operational and its outbox empty."""
    parent = topology.nodes[federation.parent]
    login = parent.credentials.username if parent.credentials != GUEST else DEFAULT_LOGIN
    address = parent.link_address(federation.transport)
    return {
        "exchange": federation.exchange,
        "vhost": VHOST,
        "type": topology.federation_type(federation),
        "parent": f"{address.host}:{address.port}",
        "login": "" if address.tls is not None else login,
        "transport": federation.transport,
        "durable": True,
        "source": "runtime",
        "state": OPERATIONAL,
        "last_error": "",
        "parent_node": parent.name,
        "outbox": {"messages": 0, "limit": OUTBOX_LIMIT, "policy": OUTBOX_POLICY, "dropped": 0},
        "forwarded": 0,
        "received": 0,
        "returned": 0,
    }


# -- the offline map ------------------------------------------------------------------------


def start_node(topology: Topology, start: str | None) -> Node:
    """The node a map starts at: `start`, or the file's first node. ValueError if there is none."""
    if not topology.nodes:
        raise ValueError(f"{topology.path or topology.name}: no nodes to map")
    name = start if start is not None else next(iter(topology.nodes))
    if name not in topology.nodes:
        raise ValueError(f"{topology.path or topology.name}: no node named '{name}'")
    return topology.nodes[name]


def offline_map(topology: Topology, start: str | None = None) -> list[str]:
    """The lines of `amq-route route map <start's host:port>` once the topology is applied
    (start: a node name, by default the file's first node); `"\\n".join(lines) + "\\n"` is
    the command's whole output."""
    return walk_map(topology, expected_views(topology), start)


def walk_map(topology: Topology, views: Mapping[str, NodeView | str], start: str | None = None) -> list[str]:
    """`route map`'s text over views of the file's nodes by name (a str: why that node could
    not be read), walked from `start` as the live command walks; a peer is the file's node by
    the name it gave (topology.far_ends), and one that is no node of the file is reported as
    such."""
    first = start_node(topology, start)
    first_view = views[first.name]
    if isinstance(first_view, str):
        return ["", "Finding Linked Brokers:", formatting.map_probe(first.endpoint, f"Failed: {first_view}")]
    ends = FarEnds(topology, views)
    walk = MapWalk(first.address, first_view)
    for peer in walk.pending():
        far = ends.reach(peer, walk.found_as(peer))
        outside = f"not a node of {topology.path or topology.name}"
        view = views.get(far.node.name, "not read") if far.node is not None else outside
        if isinstance(view, str):
            walk.failed(peer, f"Failed: {view}")
        else:
            walk.reached(peer, view)
    return walk.lines()


# -- the file's map against the live nodes --------------------------------------------------

MISSING = "missing"
EXTRA = "extra"
#: Items on a node that could not be read: neither missing nor extra, just unknown.
NOT_READ = "not read"


class Comparison(NamedTuple):
    """compare_views' result: the marked map, and how much drift it shows (objects missing,
    extra or down, plus the nodes that could not be read; 0 means the live nodes match)."""

    lines: list[str]
    drift: int


class Marked(NamedTuple):
    """One link, route or federation of the comparison: the section it belongs to (`links`,
    `routes`, `federations`), the node of the file holding it, its record (the live one when
    the node has it) and its marker ("" when it matches)."""

    section: str
    node: str
    record: formatting.Record
    marker: str
    #: Its far end: the address its node reaches it at, and which node of the file that is.
    far: FarEnd


class Marks(NamedTuple):
    """Everything the file and the live nodes hold, marked, in the file's node order; the nodes
    that could not be read, with why; the drift in words and as a count; and the far ends that
    were matched by address because a name was not known (topology.far_ends), one line each."""

    items: list[Marked]
    unread: dict[str, str]
    summary: str
    drift: int
    notes: list[str]


def _down(record: Mapping[str, Any]) -> str:
    """`down (<state>: <last error>)` for a link, route or peering not Operational, else ""
    (also for a route of a node too old to report its state)."""
    if record.get("state", OPERATIONAL) == OPERATIONAL:
        return ""
    error = record.get("last_error") or ""
    return f"down ({record.get('state')}: {error})" if error else f"down ({record.get('state')})"


def _marked(line: str, marker: str) -> str:
    return f"{line}  {marker}" if marker else line


#: A record of a comparison, with its far end and its identity there.
_Keyed = tuple[formatting.Record, FarEnd, tuple[Any, ...]]


def _pair(expected: Iterable[_Keyed], live: Iterable[_Keyed] | None) -> list[tuple[_Keyed, str | None]]:
    """Each record once, expected ones first then the live ones the file lacks, with where it
    is: "both", MISSING, EXTRA, or NOT_READ (live is None). A record in both is the live one;
    of two live ones alike (a node linked to under two addresses), the second is EXTRA."""
    live_list = list(live) if live is not None else None
    by_identity: dict[tuple[Any, ...], _Keyed] = {}
    for keyed in live_list or ():
        by_identity.setdefault(keyed[2], keyed)
    paired: list[tuple[_Keyed, str | None]] = []
    wanted = set()
    for keyed in expected:
        wanted.add(keyed[2])
        if live_list is None:
            paired.append((keyed, NOT_READ))
        elif keyed[2] in by_identity:
            paired.append((by_identity[keyed[2]], None))
        else:
            paired.append((keyed, MISSING))
    for keyed in live_list or ():
        if keyed[2] not in wanted or by_identity[keyed[2]] is not keyed:
            paired.append((keyed, EXTRA))
    return paired


def _keyed(ends: FarEnds, section: str, view: NodeView) -> list[_Keyed]:
    """The records of one section of `view`, each with its far end (the file's node, by the
    name it reports) and its identity: links by far end; routes by far end, direction and
    qpid-route's identity; federations by vhost, exchange, parent and type."""
    keyed: list[_Keyed] = []
    for record in getattr(view, section):
        if section == "links":
            far = ends.link(record)
            identity: tuple[Any, ...] = (far.key,)
        elif section == "routes":
            far = ends.route(view, record)
            kind = record["kind"]
            selector = formatting.route_selector(kind, record.get("key"), record.get("queue"))
            identity = (far.key, bool(record.get("src_local")), kind, record["exchange"], selector)
        else:
            far = ends.federation(record)
            identity = (record.get("vhost", VHOST), record["exchange"], far.key, record.get("type"))
        keyed.append((record, far, identity))
    return keyed


class _Tally:
    def __init__(self) -> None:
        self.counts = {MISSING: 0, EXTRA: 0, "down": 0, NOT_READ: 0}

    def mark(self, where: str | None, down: str = "") -> str:
        """The marker of one item, counted: where it is, or down when it is live and not up."""
        if where in (MISSING, EXTRA):
            self.counts[where] += 1
            return where
        if where == NOT_READ:
            return NOT_READ
        if down:
            self.counts["down"] += 1
        return down

    def summary(self, unread: int, path: str) -> str:
        parts = [
            f"{self.counts[MISSING]} missing" if self.counts[MISSING] else "",
            f"{self.counts[EXTRA]} extra" if self.counts[EXTRA] else "",
            f"{self.counts['down']} down" if self.counts["down"] else "",
            f"{unread} node{'s' if unread != 1 else ''} not read" if unread else "",
        ]
        if not any(parts):
            return f"No drift: the live nodes match {path}."
        return f"Drift: {', '.join(part for part in parts if part)}."

    def drift(self, unread: int) -> int:
        return self.counts[MISSING] + self.counts[EXTRA] + self.counts["down"] + unread


def mark_live(
    topology: Topology, expected: Mapping[str, NodeView], live: Mapping[str, NodeView | str]
) -> Marks:
    """Each link, route and federation of the file or of the live nodes, marked `missing`,
    `extra`, `down (<state>: <last error>)` or, on a node not read (a str in `live`, or no
    entry), `not read`. Links and federations are told apart by the node at their far end,
    routes by that node, qpid's identity (kind, exchange, key or queue) and direction,
    federations also by type. That node is the file's by the name it reports
    (topology.far_ends), so what a node made under another address of it matches the file. What
    `compare_views` prints and `topology map --live --format json|dot|png` draws."""
    tally = _Tally()
    items: list[Marked] = []
    unread: dict[str, str] = {}
    notes: list[str] = []
    planned, held_ends = FarEnds(topology, expected), FarEnds(topology, live)
    for name in topology.nodes:
        wanted = expected.get(name, NodeView([], [], []))
        got = live.get(name, "not read")
        view = got if isinstance(got, NodeView) else None
        if view is None:
            unread[name] = str(got)
        for section in ("links", "routes", "federations"):
            held = _keyed(held_ends, section, view) if view is not None else None
            for (record, far, _), where in _pair(_keyed(planned, section, wanted), held):
                # A live link, route or peering that is not Operational (a route not
                # forwarding) is drift.
                down = _down(record) if where is None else ""
                items.append(Marked(section, name, record, tally.mark(where, down), far))
                note = f"{topology.nodes[name].endpoint}: {far.note}"
                if far.note and note not in notes:
                    notes.append(note)
    summary = tally.summary(len(unread), topology.path or topology.name)
    return Marks(items, unread, summary, tally.drift(len(unread)), notes)


def compare_views(
    topology: Topology, expected: Mapping[str, NodeView], live: Mapping[str, NodeView | str]
) -> Comparison:
    """The file's map against the live nodes (`topology map FILE --live`): every node of the
    file (in its order) with `Ok` or why it could not be read, then the links (`opener ->
    peer`), the dynamic routes per exchange, the static routes and the federations, in the live
    map's layout, each line marked as `mark_live` marks it; a last line sums the drift. A
    reciprocal pair of dynamic routes is one `<=>` line when both sides are marked alike."""
    marks = mark_live(topology, expected, live)
    probes = []
    for name, node in topology.nodes.items():
        view = live.get(name)
        if name in marks.unread:
            probes.append(formatting.map_probe(node.endpoint, f"Failed: {marks.unread[name]}"))
        else:
            probes.append(
                formatting.map_probe(node.endpoint, None, view.name if isinstance(view, NodeView) else None)
            )
    links: list[str] = []
    dynamic: dict[str, dict[tuple[str, str], str]] = {}
    static: list[str] = []
    federations: list[str] = []
    for section, name, record, marker, _ in marks.items:
        here = topology.nodes[name].endpoint
        if section == "links":
            links.append(_marked(f"{here} -> {link_endpoint(record)}", marker))
        elif section == "federations":
            line = formatting.federation_line(here, record) + formatting.federation_status(record)
            federations.append(_marked(line, marker))
        elif record["kind"] == "dynamic":
            dynamic.setdefault(record["exchange"], {})[(formatting.route_peer(record), here)] = marker
        else:
            line = formatting.static_route_line(here, record) + formatting.route_status(record)
            static.append(_marked(line, marker))
    lines = ["", "Reading Brokers:", *probes, "", "Links:"]
    lines += ["", *links] if links else ["none found"]
    lines += ["", *_dynamic_lines(dynamic), ""]
    lines += ["Static Routes:", "", *static] if static else ["Static Routes:", "none found"]
    if federations:
        lines += ["", "Federations:", "", *federations]
    lines += ["", *marks.notes, marks.summary]
    return Comparison(lines, marks.drift)


def _dynamic_lines(dynamic: dict[str, dict[tuple[str, str], str]]) -> list[str]:
    """The dynamic routes per exchange as the map draws them (`A  => B`: from A into B), a
    reciprocal pair collapsed to `A <=> B` when both directions carry the same marker."""
    lines = ["Dynamic Routes:"]
    if not dynamic:
        return [*lines, "none found"]
    for exchange, directions in dynamic.items():
        lines += ["", f"Exchange {exchange}:"]
        done: set[tuple[str, str]] = set()
        for (a, b), marker in directions.items():
            if (a, b) in done:
                continue
            done.add((a, b))
            back = directions.get((b, a))
            if back is not None and back == marker and (b, a) not in done:
                done.add((b, a))
                lines.append(_marked(f"{a} <=> {b}", marker))
            else:
                lines.append(_marked(f"{a}  => {b}", marker))
    return lines
