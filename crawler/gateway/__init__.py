"""crawler-gateway: our own fetch service, owning the proxy pool for the whole fleet."""
