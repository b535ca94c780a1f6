"""Data quality: what a domain's extracted data must look like (`expect:`), each page checked against it,
each crawl's field coverage counted with its outcomes, compared with the last crawl, and reported.

- expect.py: the `expect:` section of domains.yaml, as validated models;
- checks.py: those expectations compiled once, run against one page's data;
- coverage.py: a page's quality counts, and a crawl's coverage read back from them;
- compare.py: a crawl's coverage against its expectations and the last finished crawl: alerts;
- report.py: the coverage table, as text and as JSON;
- metrics.py: `crawler_field_coverage` and its floor, for Prometheus.
"""
