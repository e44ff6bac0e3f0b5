"""amq-gateway: an AMQP 0-9-1 broker node on Trio, and the federation built on it."""

__version__ = "0.1.0"
