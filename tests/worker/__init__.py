"""Tests of crawler.worker."""
