"""DNS: hosts resolved asynchronously, once per TTL for the whole fleet, failures backed off and parked."""

from crawler.dns.lookup import Lookup, NameServers, SystemResolver, Upstream, upstream_for
from crawler.dns.resolver import HostResolver, Resolved

__all__ = ["HostResolver", "Lookup", "NameServers", "Resolved", "SystemResolver", "Upstream", "upstream_for"]
