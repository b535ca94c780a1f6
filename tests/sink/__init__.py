"""Tests of crawler.sink."""
