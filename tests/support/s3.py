"""An S3-compatible server of the tests' own: moto's server mode, a subprocess on loopback, one per
test session; each test gets a bucket of its own and the environment that points boto3 at it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from bench.s3 import moto
from crawler.storage import ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True, slots=True)
class S3Server:
    """moto's server, at `endpoint`."""

    endpoint: str

    def bucket(self) -> str:
        """A new, empty bucket."""
        name = f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def client(self) -> S3Client:
        return ObjectStore(self.endpoint).client

    def keys(self, bucket: str) -> dict[str, int]:
        """Every object of `bucket`: key -> size."""
        listed = self.client().list_objects_v2(Bucket=bucket).get("Contents", [])
        return {o["Key"]: o["Size"] for o in listed if "Key" in o and "Size" in o}

    def uploads(self, bucket: str) -> list[str]:
        """Keys of the multipart uploads begun in `bucket` and neither completed nor aborted."""
        return [u["Key"] for u in self.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The session's S3 server; credentials for it in the environment."""
    with moto() as server:
        yield S3Server(server.endpoint)


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    """A bucket of the test's own."""
    return s3_server.bucket()
