"""Tests of crawler.monitor."""
