"""Content in a live crawl of loopback sites: main content as Markdown and text, languages, a PDF and
a DOCX read, each hostile document refused with its reason, and a mirror found as a near-duplicate
whose links are not followed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from bench import documents as files
from crawler.config import load_config
from crawler.fetch.fetcher import BoundedFetcher
from crawler.frontier import exchanges
from crawler.frontier.message import Refresh
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.parse.extract import compile_fields
from crawler.sink import sql
from crawler.sink.tables import CONTENT
from crawler.visited import PageTask
from crawler.worker import wiring
from crawler.worker.content import contents
from crawler.worker.live import LiveConfig
from crawler.worker.watching import Monitoring
from crawler.worker.wiring import make_fetcher
from demo.site import Reply, Site, free_port, page, serve
from tests.support.crawls import run_crawl
from tests.support.services import settings_for
from tests.support.sites import IPS
from tests.support.visits import Observed
from tests.support.wait import until

ARTICLE = (Path(__file__).parent.parent / "content" / "pages" / "article.html").read_text(encoding="utf-8")
UDHR = dict(
    line.split("\t", 1)
    for line in (Path(__file__).parent.parent / "content" / "pages" / "udhr-article-1.tsv")
    .read_text(encoding="utf-8")
    .splitlines()
    if not line.startswith("#")
)
PDF = "application/pdf"
# Why each of bench.documents.hostile() is refused, in its order.
REFUSED = ["too-many-pages", "too-many-pages", "encrypted", "zip-bomb", "corrupt", "type-mismatch"]
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def html(body: str) -> Reply:
    return Reply(200, body.encode())


def article_in(lang: str) -> Reply:
    said = UDHR[lang]
    return html(
        f"<!doctype html><html lang='{lang}'><head><title>{lang}</title></head><body>"
        f"<nav><a href='/'>Home</a></nav><article><h1>{said[:30]}</h1>"
        + "".join(f"<p>{said}</p>" for _ in range(3))
        + "</article><footer>Copyright 2024</footer></body></html>"
    )


def document(body: bytes, content_type: str) -> Reply:
    return Reply(200, body, headers={"Content-Type": content_type})


def configure(path: Path, sites: list[Site], **rules: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "sitemaps": False, "obey_robots": False, "max_depth": 1},
                "resolve": {s.host: s.ip for s in sites},
                "allow_private_networks": True,
                "domains": {s.host: rules for s in sites},
            }
        )
    )
    return path


def pages(database_url: str) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(sql.engine_url(database_url))
    try:
        with engine.connect() as conn:
            return {r.url: dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM pages"))}
    finally:
        engine.dispose()


@pytest.fixture
def site() -> Iterator[Site]:
    hostile = {f"/hostile/{i}": document(*made) for i, made in enumerate(files.hostile().values())}
    links = ["/article", "/de", "/ja", "/ru", "/report.pdf", "/memo.docx", "/files/minutes.pdf", *hostile]
    routes = {
        **hostile,
        "/": page("Home", links),
        "/article": html(ARTICLE),
        **{f"/{lang}": article_in(lang) for lang in ("de", "ja", "ru")},
        "/report.pdf": document(files.pdf(["Annual report.", "Revenue grew."], title="Report 2024"), PDF),
        "/memo.docx": document(files.docx_file(["Memo", "The office moves in May."], title="Memo"), DOCX),
        # Served as a download: its URL's extension says what it is.
        "/files/minutes.pdf": document(
            files.pdf(["Minutes of May."], title="Minutes"), "application/octet-stream"
        ),
    }
    site = Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)  # type: ignore[arg-type]
    with serve(site):
        yield site


async def test_a_crawl_stores_main_content_languages_and_documents_and_the_feed_tells_them(
    tmp_path: Path, site: Site, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    path = configure(tmp_path / "d.yaml", [site], content={"main": True}, history={})
    monitoring = Monitoring(Metrics())
    settings, config = settings_for(amqp_url, prefix, sqlite_url, path), load_config(path)
    told: dict[str, dict[str, Any]] = {}
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await exchanges.declare(channel, exchanges.topology(config, Names(prefix)))
        queue = await channel.declare_queue("test-feed", auto_delete=True)
        await queue.bind(Names(prefix).changes, "#")
        await wiring.consume(settings, config, burst=True, seeds=[site.url()], monitoring=monitoring)
        found = pages(sqlite_url)

        async def drained() -> bool:
            while (message := await queue.get(fail=False, no_ack=True)) is not None:
                body = json.loads(message.body)
                told[body["url"]] = body
            return len(told) >= len(found)

        await until(drained, what="a version of each page on the feed", within=30)
    # Each page's version carries its content as the page view has it (a document: no Markdown).
    assert {url: {k: told[url][k] for k in CONTENT} for url in found} == {
        url: {k: row[k] for k in CONTENT} for url, row in found.items()
    }
    article = found[site.url("/article")]
    assert "# How to brew better coffee at home" in article["markdown"].splitlines()
    assert "[brew ratio guide](http://a.test:" in article["markdown"]  # links kept, made absolute
    assert "How to brew better coffee at home" in article["text"] and "](" not in article["text"]
    assert not [
        b for b in ("Accept all cookies", "Copyright 2024") if b in article["markdown"] + article["text"]
    ]
    assert article["lang"] == "en" and len(article["simhash"]) == 16
    assert {lang: found[site.url(f"/{lang}")]["lang"] for lang in ("de", "ja", "ru")} == {
        "de": "de",
        "ja": "ja",
        "ru": "ru",
    }
    pdf, memo = found[site.url("/report.pdf")], found[site.url("/memo.docx")]
    assert (pdf["text"], pdf["title"], pdf["lang"], pdf["markdown"]) == (
        "Annual report.\nRevenue grew.",
        "Report 2024",
        "en",
        None,
    )
    assert memo["text"].splitlines() == ["Memo", "The office moves in May."] and memo["title"] == "Memo"
    minutes = found[site.url("/files/minutes.pdf")]
    assert (minutes["text"], minutes["title"]) == ("Minutes of May.", "Minutes")
    # Each hostile document (bench.documents.hostile) refused with its reason; its row is no failure.
    hostile = [found[site.url(f"/hostile/{i}")] for i in range(len(REFUSED))]
    assert [r["content_refused"] for r in hostile] == REFUSED
    assert all((r["text"], r["error"], r["status_code"]) == (None, None, 200) for r in hostile)
    assert all(r["near_duplicate_of"] is None for r in found.values())
    counted = {
        (sample.labels["outcome"], sample.labels["reason"]): sample.value
        for metric in monitoring.metrics.content_pages.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    # Made: the home page (its list of links is what it has), the article, 3 languages, 2 PDFs, DOCX.
    assert counted == {("made", ""): 8} | {("refused", reason): REFUSED.count(reason) for reason in REFUSED}


async def test_content_off_stores_none_and_reads_no_document(
    tmp_path: Path, site: Site, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    path = configure(tmp_path / "d.yaml", [site])
    await run_crawl(settings_for(amqp_url, prefix, sqlite_url, path), site.url())
    found = pages(sqlite_url)
    assert found[site.url("/report.pdf")]["status_code"] == 200
    assert all(
        (r["text"], r["lang"], r["simhash"], r["content_refused"]) == (None,) * 4 for r in found.values()
    )


async def test_a_mirror_is_a_near_duplicate_whose_links_are_not_followed(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    port = free_port(IPS["a.test"], IPS["b.test"])
    links = "".join(f"<a href='/more/{i}'>more {i}</a>" for i in range(3))
    original = ARTICLE.replace("</body>", f"{links}</body>")
    # The mirror: its own name, a share line, and a word of the article changed (1 bit apart).
    mirror = (
        original.replace("The Kettle Gazette", "Kettle Mirror")
        .replace("</body>", "<footer><p>Share this story</p></footer></body>")
        .replace("Good coffee", "Great coffee", 1)
    )
    sites = [
        Site("a.test", IPS["a.test"], port, {"/": html(original)}),
        Site("b.test", IPS["b.test"], port, {"/": html(mirror)}),
    ]
    path = configure(tmp_path / "d.yaml", sites, content={}, near_duplicates="skip_links")
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(*sites):
        await run_crawl(settings, sites[0].url())
        await run_crawl(settings, sites[1].url())
    found = pages(sqlite_url)
    assert found[sites[1].url()]["near_duplicate_of"] == sites[0].url()
    assert found[sites[1].url()]["simhash"] != found[sites[0].url()]["simhash"]  # near, not equal
    assert found[sites[0].url()]["near_duplicate_of"] is None
    assert {u for u in found if u.startswith(sites[0].url())} > {sites[0].url()}  # the original's links
    assert [u for u in found if u.startswith(sites[1].url())] == [sites[1].url()]  # none of the mirror's
    assert sites[1].hits("/more/0") == 0


async def test_a_refresh_finding_the_stored_content_does_not_make_it_again(
    tmp_path: Path, site: Site, redis: Redis, prefix: str, fetchers: list[BoundedFetcher]
) -> None:
    config = load_config(configure(tmp_path / "d.yaml", [site], content={}))
    rules = config.rules_for(site.host)
    fetchers.append(make_fetcher(config))
    metrics = Metrics()
    async with contents(config, redis, Names(prefix), metrics, 1) as made:
        visitor = wiring.visitor(LiveConfig(config), redis, Names(prefix), fetchers[-1], content=made)
        for path in ("/article", "/report.pdf"):  # a page signed by its content, a document by its headers
            task = PageTask(url=site.url(path), domain=site.host, depth=0, attempts=1)
            first = Observed(
                await visitor.visit(task, rules, compile_fields(rules.extract), refresh=Refresh())
            )
            assert first.record.text is not None and first.seen.signature is not None
            again = Refresh(signature=first.seen.signature)
            second = Observed(await visitor.visit(task, rules, compile_fields(rules.extract), refresh=again))
            assert second.seen.signature == first.seen.signature and second.record.text is None
    made_count = metrics.registry.get_sample_value(
        "crawler_content_pages_total", {"domain": site.host, "outcome": "made", "reason": ""}
    )
    assert made_count == 2
