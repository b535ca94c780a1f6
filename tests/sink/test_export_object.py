"""`crawler export --to s3://BUCKET/KEY` against an S3 server of the tests' own: each format as one
object, incremental with --changed-since, and an export cut short leaving nothing under its key."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crawler.errors import ConfigError, NotFound
from crawler.settings import Settings
from crawler.sink.export import Query, export
from crawler.sink.export_object import export_to_object
from tests.sink.test_export import fill, fill_sqlite
from tests.support import versions
from tests.support.s3 import S3Server
from tests.support.services import crawler_command
from tests.support.wait import until


def crawler_export(database_url: str, s3: S3Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": database_url, "CRAWLER_S3_ENDPOINT_URL": s3.endpoint}
    argv = crawler_command("crawler", "export", *args)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def body(s3: S3Server, bucket: str, key: str) -> bytes:
    return s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture
async def stored(sqlite_url: str) -> str:
    """The export tests' three pages, on SQLite (the upload is the same whatever the database)."""
    return await fill(sqlite_url)


@pytest.fixture
async def versioned_pages(sqlite_url: str) -> str:
    await versions.store(sqlite_url)
    return sqlite_url


@pytest.mark.timeout(90)
def test_each_format_is_exported_as_one_object(
    stored: str, tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    settings = Settings(database_url=stored, s3_endpoint_url=s3_server.endpoint)
    for fmt in ("jsonl", "csv", "parquet"):
        key = f"exports/pages.{fmt}"
        assert export_to_object(settings, fmt, f"s3://{bucket}/{key}") == 3
        local = tmp_path / f"pages.{fmt}"
        export(stored, fmt, local)
        if fmt == "parquet":  # the same table (a file's metadata may differ by its writer's offsets)
            assert pq.read_table(io.BytesIO(body(s3_server, bucket, key))) == pq.read_table(local)
        else:
            assert body(s3_server, bucket, key) == local.read_bytes()
    with pytest.raises(ConfigError, match="name the object"):
        export_to_object(settings, "jsonl", f"s3://{bucket}/")
    with pytest.raises(NotFound, match="no page of that domain"):
        export_to_object(settings, "jsonl", f"s3://{bucket}/x.jsonl", Query(domain="none.test"))
    assert sorted(s3_server.keys(bucket)) == [f"exports/pages.{f}" for f in ("csv", "jsonl", "parquet")]
    assert s3_server.uploads(bucket) == []  # the refused export's upload was aborted


@pytest.mark.timeout(60)
def test_the_command_exports_incrementally_with_changed_since(
    versioned_pages: str, s3_server: S3Server, bucket: str
) -> None:
    for since, key in (("2024-05-01T07:00", "day-1.jsonl"), ("2024-05-02T08:00", "day-2.jsonl")):
        done = crawler_export(
            versioned_pages, s3_server, "--changed-since", since, "--to", f"s3://{bucket}/{key}"
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.endswith(f"pages written to s3://{bucket}/{key}\n")
    urls = {
        key: [json.loads(line)["url"] for line in body(s3_server, bucket, key).splitlines()]
        for key in ("day-1.jsonl", "day-2.jsonl")
    }
    assert urls == {
        "day-1.jsonl": [versions.BLOG, versions.LAMP, versions.DESK],
        "day-2.jsonl": [versions.BLOG, versions.LAMP],
    }


@pytest.mark.timeout(120)
async def test_an_export_cut_short_leaves_nothing_under_its_key(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    db = tmp_path / "big.db"
    fill_sqlite(db, 60_000)  # ~40 MB of JSON lines: parts go up while the export runs
    env = {
        **os.environ,
        "CRAWLER_DATABASE_URL": f"sqlite:///{db}",
        "CRAWLER_S3_ENDPOINT_URL": s3_server.endpoint,
    }
    argv = crawler_command("crawler", "export", "--to", f"s3://{bucket}/cut.jsonl")
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:

        def parts() -> int:
            uploads = s3_server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if not uploads:
                return 0
            listed = s3_server.client().list_parts(
                Bucket=bucket, Key="cut.jsonl", UploadId=uploads[0]["UploadId"]
            )
            return len(listed.get("Parts", []))

        await until(parts, lambda n: n >= 1, 60, "a part of the export uploaded")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted; nothing was left under the key" in stderr
    assert s3_server.keys(bucket) == {} and s3_server.uploads(bucket) == []
