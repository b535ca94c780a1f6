"""The benchmark harness: a static site, nginx serving it, and Scrapy, scrapy-redis and the crawler on it."""
