"""The change feed: each new version of a page, published to RabbitMQ for subscribers."""
