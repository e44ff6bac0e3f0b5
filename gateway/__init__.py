"""amq-gateway: an AMQP 0-9-1 broker node on Trio, and the federation built on it.

Layers, bottom up (docs/architecture.md, "Layers and import rules"; tests/test_layers.py
enforces them): `names` and `routing` (standard library only), `wire` (sans-I/O protocol),
`broker` (the synchronous model), `store` and `security`, `server` (the Trio adapter), and
`node` (the composition root, the only module here that knows federation) with `cli`.
"""

__version__ = "0.1.0"
