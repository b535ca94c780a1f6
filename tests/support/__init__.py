"""Test support: the helpers the test modules share (services, sites, waiting, hostile servers)."""
