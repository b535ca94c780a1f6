"""Tests of crawler.frontier."""
