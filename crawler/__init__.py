"""A distributed web crawler whose frontier is RabbitMQ, routed per target domain."""

__version__ = "0.1.0"
