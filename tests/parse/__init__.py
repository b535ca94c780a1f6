"""Tests of crawler.parse."""
