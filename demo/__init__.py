"""A small multi-host site on loopback, for the demo crawl and the tests."""
