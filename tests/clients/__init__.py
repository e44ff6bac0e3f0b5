"""Widely used clients' own test suites, run against a node (``python -m tests.clients``);
docs/clients.md records what they found. Not collected by the normal test run."""
