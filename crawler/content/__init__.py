"""Content: a page's main text as Markdown and plain text, its language, documents read into text,
simhashes for near-duplicates, and the process pool that runs the heavy parts off the event loop.

The libraries come with the `content` extra; only the pool, frames and refusal codes import without it.
"""
