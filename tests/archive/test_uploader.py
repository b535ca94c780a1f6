"""The archive's uploader against an S3 server of the tests' own: finished files uploaded and then
deleted, files being written left alone, a failed upload tried again while the process runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from crawler.archive.uploader import Uploader
from crawler.storage import ObjectStore, ObjectUrl
from tests.support.s3 import S3Server
from tests.support.wait import until


class Heard:
    """What the uploader reported (an UploadReport)."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.errors: list[str] = []
        self.files: list[int] = []

    def uploaded(self, name: str, nbytes: int, seconds: float) -> None:
        self.done.append(name)

    def failed(self, name: str, error: str) -> None:
        self.errors.append(error)

    def waiting(self, files: int, nbytes: int) -> None:
        self.files.append(files)


@pytest.mark.timeout(60)
async def test_finished_files_are_uploaded_then_deleted_and_open_ones_left_alone(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a-1.warc.gz").write_bytes(b"left by an earlier process")
    (spool / "a-2.warc.gz.open").write_bytes(b"being written, or its writer killed")
    heard = Heard()
    uploader = Uploader(spool, ObjectStore(s3_server.endpoint), ObjectUrl(bucket, "w"), heard)
    assert uploader.start() == ["a-1.warc.gz"]
    (spool / "a-3.warc.gz").write_bytes(b"closed now")
    uploader.closed(spool / "a-3.warc.gz")
    await until(lambda: sorted(heard.done), lambda names: names == ["a-1.warc.gz", "a-3.warc.gz"], 30)
    assert await asyncio.to_thread(uploader.close) == []
    assert s3_server.keys(bucket) == {"w/a-1.warc.gz": 26, "w/a-3.warc.gz": 10}
    assert sorted(p.name for p in spool.iterdir()) == ["a-2.warc.gz.open"]
    assert heard.files[-1] == 0 and heard.errors == []


@pytest.mark.timeout(60)
async def test_a_failed_upload_is_tried_again_while_the_process_runs(
    tmp_path: Path, s3_server: S3Server
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "b-1.warc.gz").write_bytes(b"records")
    bucket = f"later-{time.monotonic_ns()}"
    heard = Heard()
    store = ObjectStore(s3_server.endpoint)
    uploader = Uploader(spool, store, ObjectUrl(bucket, ""), heard, delays=(0.2,))
    uploader.start()
    await until(lambda: len(heard.errors), lambda n: n >= 2, 30, "two failed tries")
    assert "NoSuchBucket" in heard.errors[0] and (spool / "b-1.warc.gz").exists()
    assert uploader.pending() == ["b-1.warc.gz"]
    store.client.create_bucket(Bucket=bucket)
    await until(lambda: heard.done, lambda names: names == ["b-1.warc.gz"], 30, "the upload")
    await asyncio.to_thread(uploader.close)
    assert s3_server.keys(bucket) == {"b-1.warc.gz": 7} and not (spool / "b-1.warc.gz").exists()
