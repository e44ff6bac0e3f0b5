"""The bounds federation puts on the queues it declares. Standard library only, so the
simulator (simulations.holding) models a bridge queue's limit from the very value the
dynamic routes declare it with, without loading trio or the broker."""

from __future__ import annotations

#: A durable dynamic route's bridge queue on the source keeps at most this many messages while
#: the destination is away; beyond, the oldest are dropped (x-overflow drop-head, counted as the
#: queue's `dropped`).
BRIDGE_MAX_LENGTH = 100_000
