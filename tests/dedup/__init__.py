"""Tests of crawler.dedup."""
