"""Names every part of amq-gateway agrees on: the exchanges a node handles itself.

Written once here; the broker, management, federation and the CLIs import them.
"""

from __future__ import annotations

#: Management requests (gateway.management_amqp): publishing here is how tools manage a node.
MANAGEMENT_EXCHANGE = "amq.gateway.management"
#: Dynamic routes' adverts (federation.dynamic_route), published by a downstream node.
CONTROL_EXCHANGE = "amq.gateway.federation"
