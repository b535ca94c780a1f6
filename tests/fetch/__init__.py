"""Tests of crawler.fetch."""
