"""bench.web's loopback web (dnsmasq and nginx for real) and bench.politeness's reading of its log."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench.politeness import Rate, Request, excess, read_log, violations
from bench.web import WebSpec, generate, serve
from crawler.dns import HostResolver
from crawler.names import Names
from crawler.openweb import DnsConfig
from demo.site import free_port
from tests.support.wait import until


def test_a_bucket_counts_each_request_over_budget_once() -> None:
    # 2/s, burst 1: 0.0 passes, 0.1 is early, 0.5 passes (the early one took nothing), 0.7 is early.
    assert excess([0.0, 0.1, 0.5, 0.7], Rate(2, 1), slack=0) == 2
    assert excess([0.0, 0.5, 1.0, 1.5], Rate(2, 1), slack=0) == 0
    assert excess([0.0, 0.0, 0.0, 1.0], Rate(1, 3), slack=0) == 0  # the burst at once
    assert excess([0.0, 0.48], Rate(2, 1), slack=0.05) == 0  # within the slack


def test_violations_are_counted_per_host_and_per_address() -> None:
    log = [
        Request(t, h, ip, "127.0.0.1", 200, "/")
        for t, h, ip in [
            (0.0, "a.test", "127.1.0.1"),
            (0.1, "b.test", "127.1.0.1"),
            (0.2, "c.test", "127.1.0.1"),
            (0.0, "d.test", "127.1.0.2"),
            (0.3, "d.test", "127.1.0.2"),
        ]
    ]
    found = violations(log, host=Rate(2, 1), ip=Rate(2, 1), slack=0)
    assert found.per_host == {"d.test": 1}
    assert found.per_ip == {"127.1.0.1": 2, "127.1.0.2": 1}
    assert (found.requests, found.hosts, found.addresses) == (5, 4, 2)


async def test_a_small_web_answers_by_name_and_its_log_shows_who_was_asked_how_fast(
    tmp_path: Path, redis: Redis, prefix: str
) -> None:
    spec = WebSpec(hosts=40, per_ip=8, port=free_port("127.1.0.1"))
    web = generate(spec, tmp_path / "web")
    assert web.hosts_file.read_text().splitlines()[:2] == ["127.1.0.1 h0.d0.test", "127.1.0.1 h1.d0.test"]
    assert spec.address(8) == "127.1.0.2" and spec.addresses == 5
    with serve(web) as running:
        config = DnsConfig.model_validate({"nameservers": [running.names.spelled]})
        resolver = HostResolver(redis, Names(prefix), config)
        assert [str(a) for a in (await resolver.resolve("h9.d2.test")).addresses] == ["127.1.0.2"]
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def get(i: int, path: str = "/", host: str | None = None) -> tuple[int, str]:
                url = f"http://{spec.address(i)}:{spec.port}{path}"
                async with session.get(url, headers={"Host": host or spec.name(i)}) as answer:
                    return answer.status, await answer.text()

            status, index = await get(0)
            assert status == 200
            assert re.findall(r"href='([^']+)'", index) == [
                "/p/1",
                "/p/2",
                *(f"http://h{c}.d{c // 4}.test:{spec.port}/" for c in (1, 2, 3, 4)),
            ]
            status, page = await get(0, "/p/2")
            assert status == 200 and len(re.findall(r"href='http://h\d+\.d\d+\.test", page)) == 2
            assert (await get(0, host="nowhere.test"))[0] == 404
            for i in range(8):  # every host on 127.1.0.1 at once: polite per host, not per IP
                await get(i)
    requests = await until(lambda: read_log(web.log), lambda r: len(r) == 11, within=5)
    assert {(r.host, r.address) for r in requests[-8:]} == {(spec.name(i), "127.1.0.1") for i in range(8)}
    found = violations(requests[-8:], host=Rate(1, 1), ip=Rate(1, 2))
    assert found.per_host == {}
    assert found.per_ip == {"127.1.0.1": 6}
