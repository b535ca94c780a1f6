"""Dead letters through the service layer: listed, grouped and paged as the queue holds them, then
replayed or purged by domain and reason."""

from __future__ import annotations

import aio_pika

from crawler.names import HEADER_DOMAIN, HEADER_REASON, Names
from crawler.service import Control, DeadGroup


async def _bury(control: Control, domain: str, reason: str, n: int) -> None:
    names = Names(control.settings.prefix)
    async with await aio_pika.connect(control.settings.amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)  # each publish confirmed: queued
        for i in range(n):
            message = aio_pika.Message(
                f'{{"v": 1, "url": "http://{domain}/gone/{i}"}}'.encode(),
                headers={HEADER_REASON: reason, HEADER_DOMAIN: domain},
            )
            await channel.default_exchange.publish(message, routing_key=names.dead)


async def test_dead_letters_are_grouped_paged_replayed_and_purged(control: Control) -> None:
    dead = control.dead
    await _bury(control, "a.test", "transient", 3)
    await _bury(control, "b.test", "invalid", 1)
    groups = await dead.groups()
    assert [(g.domain, g.reason, g.count) for g in groups] == [
        ("a.test", "transient", 3),
        ("b.test", "invalid", 1),
    ]
    assert all(isinstance(g, DeadGroup) for g in groups)
    assert [d.url for d in await dead.letters("b.test")] == ["http://b.test/gone/0"]
    page = await dead.page(None, None, 2)
    assert [d.url for d in page.letters] == ["http://a.test/gone/0", "http://a.test/gone/1"]
    assert page.next == 2
    assert await dead.purge("b.test") == 1
    assert await dead.replay("a.test", "transient") == 3
    assert await dead.letters() == []
