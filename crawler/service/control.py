"""Control of a fleet: its connections opened once, and the verbs over them grouped by what they act
on: crawls, domains, recrawls, stored pages, dead letters, the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

from crawler.config import CrawlConfig
from crawler.frontier.client import Frontier, frontier
from crawler.frontier.crawls import CrawlState
from crawler.service.crawls import Crawls
from crawler.service.dead_letters import DeadLetters
from crawler.service.domains import Domains
from crawler.service.fleet import Fleet
from crawler.service.pages import StoredPages
from crawler.service.recrawls import Recrawls
from crawler.service.status_reads import StatusReads
from crawler.settings import Settings
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database, opened
from crawler.sink.domains import DomainStore
from crawler.sink.history import PageHistory
from crawler.sink.sql import check_schema, migrate

Schema = Literal["upgrade", "check", "none"]


class Control:
    """The verbs over one fleet's services, by what they act on; open it with `Control.open`."""

    def __init__(
        self,
        settings: Settings,
        config: CrawlConfig,
        f: Frontier,
        store: CrawlStore,
        history: PageHistory,
        domains: DomainStore | None = None,
        database: Database | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        # Pauses kept in the database too: a paused domain stays paused across a Redis loss.
        state = CrawlState(f.redis, settings.names, domains)
        self.database = database
        reads = StatusReads(settings, config, f, database)
        self.crawls = Crawls(settings, config, f, store, state)
        self.domains = Domains(settings, config, f, state, reads)
        self.recrawls = Recrawls(settings, config, f)
        self.pages = StoredPages(settings, config, history)
        self.dead = DeadLetters(settings, f)
        self.fleet = Fleet(settings, config, f, store, reads)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        config: CrawlConfig,
        role: str,
        schema: Schema = "upgrade",
        database: Database | None = None,
    ) -> AsyncIterator[Control]:
        """Connect to RabbitMQ, Redis and the database (`database`, the process's; None: one of its
        own, closed with it), and declare the topology. The database's `schema` is upgraded, or
        checked to be the newest (a command that reads creates none), or left alone ("none": the verbs
        used read no table, the dead letters' say)."""
        async with AsyncExitStack() as stack:
            db = stack.enter_context(opened(database or settings.database_url))
            if schema != "none":
                await asyncio.to_thread(migrate if schema == "upgrade" else check_schema, db)
            f = await stack.enter_async_context(frontier(settings, role, config, db))
            await f.declare(config)
            yield cls(settings, config, f, CrawlStore(db), PageHistory(db), DomainStore(db), db)
