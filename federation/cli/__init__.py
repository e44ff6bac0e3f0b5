"""amq-route and amq-config: qpid-route and qpid-config's grammar and output, on our nodes.

The commands talk to nodes only through management_client (JSON requests over AMQP), take the
client factory as a parameter so unit tests drive them against fake nodes, and leave every
piece of exact text to formatting, which is pure.
"""
