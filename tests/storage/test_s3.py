"""The S3 client against an S3-compatible server of the tests' own (moto): a file uploaded in
checksummed parts and checked, a byte range read, a stream completed whole or not at all."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from crawler.errors import ConfigError, StorageError
from crawler.storage import ObjectStore, ObjectUrl
from crawler.storage.s3 import MIN_PART, crc32s
from tests.support.s3 import S3Server


def test_a_file_is_uploaded_in_parts_and_read_back_by_range(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    path = tmp_path / "f.warc.gz"
    data = os.urandom(MIN_PART * 2 + 1234)
    path.write_bytes(data)
    store = ObjectStore(s3_server.endpoint, part_size=MIN_PART)
    url = ObjectUrl(bucket, "warc/f.warc.gz")
    assert store.upload(path, url) == len(data)
    head = s3_server.client().head_object(Bucket=bucket, Key=url.key, ChecksumMode="ENABLED")
    assert head["ETag"].endswith('-3"')  # three parts
    assert head["ChecksumCRC32"].split("-")[0] in crc32s(path, MIN_PART)
    assert store.read(url, MIN_PART - 10, 20) == data[MIN_PART - 10 : MIN_PART + 10]
    with pytest.raises(StorageError, match=r"NoSuchKey|Not Found|404"):
        store.read(ObjectUrl(bucket, "warc/none"), 0, 10)
    with pytest.raises(StorageError, match="NoSuchBucket"):
        store.upload(path, ObjectUrl("no-such-bucket-here", "x"))


def test_a_stream_is_one_object_once_whole_and_none_if_cut(s3_server: S3Server, bucket: str) -> None:
    store = ObjectStore(s3_server.endpoint)
    with store.writer(ObjectUrl(bucket, "out/whole.jsonl"), part_size=MIN_PART) as sink:
        for i in range(3):
            sink.write(bytes([65 + i]) * (MIN_PART // 2 + 7))
    assert s3_server.keys(bucket) == {"out/whole.jsonl": 3 * (MIN_PART // 2 + 7)}
    with (
        pytest.raises(RuntimeError),
        store.writer(ObjectUrl(bucket, "out/cut.jsonl"), part_size=MIN_PART) as sink,
    ):
        sink.write(b"x" * (MIN_PART + 1))  # one part sent
        assert s3_server.uploads(bucket) == ["out/cut.jsonl"]
        raise RuntimeError("the export stops")
    assert "out/cut.jsonl" not in s3_server.keys(bucket)
    assert s3_server.uploads(bucket) == []  # aborted: its parts are gone too
    # Text through the usual wrappers, as an export writes it.
    with store.writer(ObjectUrl(bucket, "out/text.csv")) as sink:
        text = io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8", newline="")
        text.write("a,b\r\n1,é\r\n")
        text.flush()
        text.detach()
    body = s3_server.client().get_object(Bucket=bucket, Key="out/text.csv")["Body"].read()
    assert body == "a,b\r\n1,é\r\n".encode()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("s3://Bucket/x", "not a bucket name"),
        ("s3://ab/x", "not a bucket name"),
        ("s3://bucket//x", "empty part"),
        ("/data/warc", "not an object URL"),
    ],
)
def test_an_object_url_is_checked(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        ObjectUrl.parse(text)


def test_an_object_url_names_objects_under_it() -> None:
    base = ObjectUrl.parse("s3://crawl-data/warc")
    assert str(base.child("a.warc.gz")) == "s3://crawl-data/warc/a.warc.gz"
    assert str(ObjectUrl.parse("s3://crawl-data").child("a")) == "s3://crawl-data/a"
    assert str(base.child("")) == "s3://crawl-data/warc/"
