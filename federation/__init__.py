"""Federation: links between nodes and what travels over them.

Links (client.py, link.py) keep one connection to a peer alive, retrying with backoff; routes
(routes.py, dynamic*.py: exchange, queue and dynamic routes as in the Qpid C++ broker) and the
OpenAMQ federation types (attachment.py, federations.py) run over them; manager.py owns them
all for one node and persistence.py keeps them across restarts. requests.py,
management_client.py, routemap.py and formatting.py are the typed management requests and
their client, shared by the command lines (cli/) and the topology planner.

Who may import it: the node's composition root and the console scripts' composer
(gateway.cli), and the planner's live modules. Federation imports the broker, the wire layer
and gateway.routing, never topology; nothing imports federation.cli.
"""
