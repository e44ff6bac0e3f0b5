"""AMQP routing semantics, once: the broker, federation, the planner (topology.flow) and the
Spark jobs all route with this package, so they cannot disagree.

Standard library only (tests/test_layers.py checks it) and I/O-free: anything may import it,
and it imports nothing of the project but itself. Values are plain: routing keys, header
mappings, binding arguments, and destinations that are any hashable value.

- `bindings`: binding identity (`freeze`, `binding_identity`) and what every matcher shares;
- `direct`, `fanout`, `topic`, `headers`: one matcher per exchange type; `matchers` picks one
  by type name (`matcher_for`);
- `graph`: the exchange-graph walk (default exchange, exchange-to-exchange bindings, alternate
  exchanges), over the broker's objects or plain data (`ExchangeGraph`);
- `predicate`: `binding_matches`, one binding against one message, for DataFrame joins;
- `federation_types`: OpenAMQ's federation types and the forward / route-locally decision;
- `interest`: dynamic routing's interest tables (path-vector, one path per origin);
- `stamps`: the origin stamp dynamic routing puts in a forwarded message's headers;
- `sender_selected`: the extra routing keys of RabbitMQ's CC and BCC headers.
"""

from gateway.routing.bindings import Arguments as Arguments
from gateway.routing.bindings import Binding as Binding
from gateway.routing.bindings import Identity as Identity
from gateway.routing.bindings import binding_identity as binding_identity
from gateway.routing.bindings import freeze as freeze
from gateway.routing.direct import DirectMatcher as DirectMatcher
from gateway.routing.fanout import FanoutMatcher as FanoutMatcher
from gateway.routing.federation_types import ALIASES as ALIASES
from gateway.routing.federation_types import BEHAVIOURS as BEHAVIOURS
from gateway.routing.federation_types import Behaviour as Behaviour
from gateway.routing.federation_types import Decision as Decision
from gateway.routing.federation_types import default_type as default_type
from gateway.routing.federation_types import resolve_type as resolve_type
from gateway.routing.graph import DEFAULT_EXCHANGE as DEFAULT_EXCHANGE
from gateway.routing.graph import ExchangeGraph as ExchangeGraph
from gateway.routing.graph import ExchangeNode as ExchangeNode
from gateway.routing.graph import Graph as Graph
from gateway.routing.graph import reach as reach
from gateway.routing.headers import HeadersMatcher as HeadersMatcher
from gateway.routing.interest import Advert as Advert
from gateway.routing.interest import InterestTable as InterestTable
from gateway.routing.matchers import EXCHANGE_TYPES as EXCHANGE_TYPES
from gateway.routing.matchers import Matcher as Matcher
from gateway.routing.matchers import matcher_for as matcher_for
from gateway.routing.predicate import binding_matches as binding_matches
from gateway.routing.sender_selected import BCC_HEADER as BCC_HEADER
from gateway.routing.sender_selected import CC_HEADER as CC_HEADER
from gateway.routing.sender_selected import extra_routing_keys as extra_routing_keys
from gateway.routing.stamps import DEST_HEADER as DEST_HEADER
from gateway.routing.stamps import TRACE_HEADER as TRACE_HEADER
from gateway.routing.stamps import UNSTAMPED as UNSTAMPED
from gateway.routing.stamps import Stamp as Stamp
from gateway.routing.stamps import stamp_headers as stamp_headers
from gateway.routing.stamps import stamp_of as stamp_of
from gateway.routing.topic import TopicMatcher as TopicMatcher
from gateway.routing.topic import topic_words as topic_words
