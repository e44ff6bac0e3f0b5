"""Throughput and latency harness: amq-gateway against RabbitMQ, same machine, same run."""
