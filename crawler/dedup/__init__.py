"""Dedup: the Redis store of the URLs already seen."""

from crawler.dedup.store import BloomShape, SeenStore

__all__ = ["BloomShape", "SeenStore"]
