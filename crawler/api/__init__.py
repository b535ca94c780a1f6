"""crawler-api: the HTTP control plane over the service layer (crawler.service). Nothing imports it."""
