"""Dynamic routing's interest table: who wants which messages of one exchange, and via whom.

Pure logic, no I/O: the node's dynamic routes (federation.dynamic) feed it and ask it where to
forward a message, and the planner's flow model (topology.flow) and the Spark simulator use the
same class, so models route exactly as nodes do.

Theory of operation (docs/federation-design.md has the long form):

- A node's own bindings on the exchange are its *interest*; it advertises each one to every
  node it pulls from (its upstreams) with the path ``(self,)``.
- A node that receives an advertisement from a downstream neighbour keeps it, and advertises
  it further upstream with itself prepended to the path, unless the upstream is already on
  the path (a loop) or is excluded by the route.
- For each origin the *best* advertisement wins: shortest path, ties broken by comparing the
  paths. Every node applies the same rule to the paths it was sent, so a best path's suffix is
  the next node's best path: next hops agree along the way (path-vector routing).
- A message carries the set of origins it must still reach. A node delivers locally only if
  it is in that set, and forwards to each neighbour only the origins whose best path starts
  there. Each origin is reached over exactly one path, so every node receives a message at
  most once, in rings and full meshes alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.routing.bindings import binding_identity, freeze
from gateway.routing.matchers import Matcher, matcher_for

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Advert:
    """One binding of one origin node, as seen by a neighbour: path[0] sent it, path[-1] owns it.

    Equality uses the binding's frozen image, so identical bindings are one advert whatever the
    order of their arguments; the plain arguments ride along for matching.
    """

    origin: str
    key: str
    identity: Hashable
    path: Path
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def of(cls, origin: str, key: str, arguments: dict[str, Any], path: Path) -> Advert:
        return cls(origin, key, freeze(arguments), path, arguments)

    def sort_key(self) -> tuple[int, Path]:
        return len(self.path), self.path

    def via(self, node: str) -> Advert:
        """This advert as `node` passes it on upstream."""
        return Advert(self.origin, self.key, self.identity, (node, *self.path), self.arguments)


class InterestTable:
    """Interest in one exchange as one node sees it."""

    def __init__(self, node: str, exchange_type: str) -> None:
        self.node = node
        self.exchange_type = exchange_type
        self._local: Counter[tuple[str, Hashable]] = Counter()
        self._local_arguments: dict[tuple[str, Hashable], dict[str, Any]] = {}
        self._received: dict[str, set[Advert]] = {}
        self._best: dict[tuple[str, str, Hashable], Advert] = {}
        self._next_hop: dict[str, str] = {}
        self._matcher: Matcher = matcher_for(exchange_type)

    # -- local bindings -----------------------------------------------------------------------

    def bind_local(self, key: str, arguments: dict[str, Any]) -> bool:
        """A local queue bound to the exchange; True if this is new interest (advertise it)."""
        identity = binding_identity(key, arguments)
        self._local[identity] += 1
        self._local_arguments[identity] = arguments
        return self._local[identity] == 1

    def unbind_local(self, key: str, arguments: dict[str, Any]) -> bool:
        """A local binding went away; True if it was the last identical one (withdraw it)."""
        identity = binding_identity(key, arguments)
        if self._local[identity] == 0:
            return False
        self._local[identity] -= 1
        if self._local[identity]:
            return False
        del self._local[identity]
        del self._local_arguments[identity]
        return True

    # -- what neighbours told us --------------------------------------------------------------

    def replace_from(self, neighbour: str, adverts: Iterable[Advert]) -> None:
        """Everything `neighbour` advertises now (a full resync replaces what it said before)."""
        kept = {advert for advert in adverts if self.node not in advert.path and advert.path[0] == neighbour}
        if kept:
            self._received[neighbour] = kept
        else:
            self._received.pop(neighbour, None)
        self._recompute()

    def forget(self, neighbour: str) -> None:
        """The neighbour's route is gone: none of its interest stands any more."""
        self.replace_from(neighbour, ())

    def _recompute(self) -> None:
        """Best advert per binding, the matcher over them, and one next hop per origin."""
        best: dict[tuple[str, str, Hashable], Advert] = {}
        for adverts in self._received.values():
            for advert in adverts:
                identity = (advert.origin, advert.key, advert.identity)
                current = best.get(identity)
                if current is None or advert.sort_key() < current.sort_key():
                    best[identity] = advert
        matcher = matcher_for(self.exchange_type)
        per_origin: dict[str, Advert] = {}
        for advert in best.values():
            matcher.bind(advert.key, advert.arguments, advert.origin)
            current = per_origin.get(advert.origin)
            if current is None or advert.sort_key() < current.sort_key():
                per_origin[advert.origin] = advert
        self._best = best
        self._matcher = matcher
        self._next_hop = {origin: advert.path[0] for origin, advert in per_origin.items()}

    def held(self) -> tuple[int, int]:
        """Other nodes' interest this node routes by: the bindings, and the hops of their
        paths added up (a path growing shorter changes the second alone)."""
        return len(self._best), sum(len(advert.path) for advert in self._best.values())

    # -- what we tell an upstream ---------------------------------------------------------------

    def advertised(self) -> set[Advert]:
        """Everything this node could advertise, before per-upstream loop and exclude filters:
        when it changes, upstreams need fresh adverts."""
        return self.adverts_for(None)

    def adverts_for(self, upstream: str | None, excludes: Iterable[str] = ()) -> set[Advert]:
        """The complete set of adverts to send to `upstream`, a node this one pulls from."""
        excluded = {*excludes} if upstream is None else {upstream, *excludes}
        adverts = {
            Advert.of(self.node, key, self._local_arguments[(key, identity)], (self.node,))
            for key, identity in self._local
        }
        for advert in self._best.values():
            if not excluded.intersection(advert.path):
                adverts.add(advert.via(self.node))
        return adverts

    # -- routing a message ----------------------------------------------------------------------

    def next_hops(self) -> dict[str, str]:
        """origin -> the neighbour on the best path to it."""
        return dict(self._next_hop)

    def forward(
        self, routing_key: str, headers: dict[str, Any] | None, destinations: frozenset[str] | None
    ) -> dict[str, frozenset[str]]:
        """neighbour -> the origins a message must reach through it.

        `destinations` is the set the message arrived with (None: published here, so every
        origin with matching interest is a destination).
        """
        matched: set[Any] = self._matcher.match(routing_key, headers)  # origins were bound
        if destinations is not None:
            matched &= destinations
        matched.discard(self.node)
        plan: dict[str, set[str]] = {}
        next_hop = self._next_hop
        for origin in matched:
            plan.setdefault(next_hop[origin], set()).add(origin)
        return {neighbour: frozenset(origins) for neighbour, origins in plan.items()}

    def delivers_locally(self, destinations: frozenset[str] | None) -> bool:
        """Whether a message that arrived with `destinations` may go to this node's own queues."""
        return destinations is None or self.node in destinations
