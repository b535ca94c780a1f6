"""The WARC archive in object storage, against the real services and an S3 server of the tests' own:
files written in the spool, uploaded once closed and deleted there only then, rows naming the
objects; `crawler reparse` reading the records by ranged GETs; an upload that fails left in the spool
and uploaded by the next process, no record lost."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from redis.asyncio import Redis

from crawler.archive import read
from crawler.archive.source import ArchiveSource
from crawler.config import load_config
from crawler.monitor.metrics import Metrics
from crawler.settings import Settings
from crawler.worker import wiring
from crawler.worker.watching import Monitoring
from tests.scheduler.test_recrawl import rows
from tests.support import api as api_support
from tests.support.api import READER
from tests.support.fresh import serving
from tests.support.s3 import S3Server
from tests.support.services import run, settings_for
from tests.worker.test_archive import archived, configure, site_of


def s3_settings(settings: Settings, tmp_path: Path, s3: S3Server, bucket: str) -> Settings:
    return dataclasses.replace(
        settings,
        archive_dir=f"s3://{bucket}/crawl/warc",
        archive_spool=str(tmp_path / "spool"),
        s3_endpoint_url=s3.endpoint,
    )


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.timeout(120)
async def test_a_crawl_is_archived_to_object_storage_and_reparsed_from_it(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    s3_server: S3Server,
    bucket: str,
) -> None:
    site = site_of(30)
    config_path = configure(tmp_path / "d.yaml", site, top={"archive_max_bytes": 8_000})
    settings = s3_settings(
        settings_for(amqp_url, prefix, sqlite_url, config_path), tmp_path, s3_server, bucket
    )
    monitoring = Monitoring(Metrics())
    with serving(site):
        await wiring.consume(
            settings, load_config(config_path), burst=True, seeds=[site.url()], monitoring=monitoring
        )
    objects = s3_server.keys(bucket)
    # Rotated at 8 kB: several files, every one uploaded whole and gone from the spool.
    assert len(objects) >= 3 and all(key.startswith("crawl/warc/") for key in objects)
    assert names(Path(settings.archive_spool)) == []
    metrics = monitoring.metrics
    assert metric(metrics, "crawler_archive_uploads_total", outcome="uploaded") == len(objects)
    assert metric(metrics, "crawler_archive_uploaded_bytes_total") == sum(objects.values())
    assert metric(metrics, "crawler_archive_files_waiting") == 0
    stored = rows(sqlite_url)
    assert len(stored) == 33
    source = ArchiveSource.of(settings)
    for url, row in stored.items():
        assert row["warc_file"].startswith(f"s3://{bucket}/crawl/warc/crawler-")
        assert row["warc_file"].removeprefix(f"s3://{bucket}/") in objects
        assert read(source, archived(row)).url == url  # a ranged GET
    # The API's page view: a record read from the store.
    with api_support.running(settings) as api, api.client(READER) as client:
        page = stored[site.url("/p/3")]
        answer = client.get(f"/v1/pages/{page['id']}/archived")
        assert answer.status_code == 200, answer.text
        assert answer.content == read(source, archived(page)).body and b"<h1>p3</h1>" in answer.content
        assert answer.headers["crawler-archived-status"] == "200"
        assert answer.headers["crawler-archived-content-type"].startswith("text/html")
        assert answer.headers["content-security-policy"].startswith("sandbox")
        missing = client.get(f"/v1/pages/{page['id'] + 1000}/archived")
        assert missing.status_code == 404
    # A selector added: the reparse reads every page's record from the store, nothing from disk.
    config_path.write_text(config_path.read_text().replace("heading: h1", "heading: h1\n      body: p"))
    done = run("crawler", ["reparse", "--no-links", "--workers", "2"], settings)
    assert done.returncode == 0, done.stderr
    assert "0 unreadable" in done.stdout and "31 changed" in done.stdout, done.stdout
    again = rows(sqlite_url)
    assert again[site.url("/p/3")]["data"] == {"heading": "p3", "body": "product 3 " * 49 + "product 3"}


@pytest.mark.timeout(120)
async def test_an_upload_that_keeps_failing_leaves_the_file_for_the_next_process_and_no_record_is_lost(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis, s3_server: S3Server
) -> None:
    site = site_of(20)
    config_path = configure(tmp_path / "d.yaml", site, top={"archive_max_bytes": 8_000})
    bucket = "test-later-" + prefix.lower()  # not made yet: every upload fails (NoSuchBucket)
    settings = s3_settings(
        settings_for(amqp_url, prefix, sqlite_url, config_path), tmp_path, s3_server, bucket
    )
    config = load_config(config_path)
    monitoring = Monitoring(Metrics())
    with serving(site):
        await wiring.consume(settings, config, burst=True, seeds=[site.url()], monitoring=monitoring)
    spool = Path(settings.archive_spool)
    left = names(spool)
    assert len(left) >= 2 and all(name.endswith(".warc.gz") for name in left)
    metrics = monitoring.metrics
    assert metric(metrics, "crawler_archive_uploads_total", outcome="failed") >= len(left)
    assert metric(metrics, "crawler_archive_files_waiting") == len(left)
    assert "NoSuchBucket" in metrics.archive_upload_error
    # Meanwhile the records are read from the spool.
    stored = rows(sqlite_url)
    source = ArchiveSource.of(settings)
    assert all(read(source, archived(row)).url == url for url, row in stored.items())
    # The bucket is there now: the next process uploads what the last one left, first.
    s3_server.client().create_bucket(Bucket=bucket)
    monitoring = Monitoring(Metrics())
    await wiring.consume(settings, config, burst=True, monitoring=monitoring)
    assert names(spool) == []
    objects = s3_server.keys(bucket)
    assert sorted(key.rsplit("/", 1)[1] for key in objects) == left
    assert metric(monitoring.metrics, "crawler_archive_uploads_total", outcome="uploaded") == len(left)
    assert len(stored) == 23
    for url, row in stored.items():
        assert read(source, archived(row)).url == url  # every one from the store
