"""Hosts as input: one checker of host names, registered domains, the domains file, per-crawl caps."""

from crawler.hosts.caps import HostCaps, HostVerdict
from crawler.hosts.checks import check_domain, check_host, check_suffix, suffix_matches
from crawler.hosts.listing import read_domains_file
from crawler.hosts.registered import registered_domain

__all__ = [
    "HostCaps",
    "HostVerdict",
    "check_domain",
    "check_host",
    "check_suffix",
    "read_domains_file",
    "registered_domain",
    "suffix_matches",
]
