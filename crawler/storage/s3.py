"""The S3 client (boto3, thread-safe, shared by a process's threads): a file uploaded in parts and
checked against the store's own account of it, a byte range read back, a stream written as one
multipart upload that is completed only when the stream ends whole."""

from __future__ import annotations

import base64
import contextlib
import io
import zlib
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from crawler.errors import StorageError
from crawler.storage.location import ObjectUrl

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# An archive file (1 GB by default) goes in 16 parts, 4 at a time; a failed part is sent again alone.
FILE_PART = 64 * 1024 * 1024
# An export's parts: S3's smallest part but the last is 5 MiB, and 10,000 parts make at most ~80 GB.
STREAM_PART = 8 * 1024 * 1024
MIN_PART = 5 * 1024 * 1024
CHECKSUM: Final = "CRC32"  # each part's, computed by boto3 and checked by the store as it takes the part
# botocore's standard retry mode: a throttled or failed request (5xx, a reset connection) is sent
# again with jittered exponential back-off, this many tries in all.
ATTEMPTS = 5
_CHUNK = 1 << 20


def _failures() -> tuple[type[Exception], ...]:
    """What boto3 raises for a request that failed. Imported when first needed: boto3 costs a
    process half a second and 25 MB, which one that never speaks to a store should not pay."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError, Boto3Error


def _answered(exc: BaseException) -> str | None:
    """The store's error code, if it answered with one."""
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return str(code) if code is not None else None


def _why(exc: BaseException) -> str:
    # boto3's transfer wraps the store's own answer, which says it best.
    if _answered(exc) is None and isinstance(exc.__context__, _failures()):
        exc = exc.__context__
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        return f"{error.get('Code', '?')}: {error.get('Message', '') or exc}"
    return f"{type(exc).__name__}: {exc}"


def _b64(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def crc32s(path: Path, part_size: int) -> tuple[str, str]:
    """A file's CRC-32 as S3 gives a whole object's, and as it gives one uploaded in parts of
    `part_size` (the CRC-32 of the parts' CRC-32s), each base64 of the big-endian value."""
    whole = 0
    parts = bytearray()
    with path.open("rb") as file:
        while part := file.read(part_size):
            value = zlib.crc32(part)
            parts += value.to_bytes(4, "big")
            whole = zlib.crc32(part, whole)
    return _b64(whole), _b64(zlib.crc32(parts))


class ObjectStore:
    """One S3 endpoint (None: AWS itself, or what AWS_ENDPOINT_URL_S3 says), credentials from the
    standard chain (environment, shared files, a role)."""

    def __init__(
        self, endpoint_url: str | None = None, *, attempts: int = ATTEMPTS, part_size: int = FILE_PART
    ) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        config = Config(
            retries={"mode": "standard", "max_attempts": attempts},
            request_checksum_calculation="when_supported",
            response_checksum_validation="when_supported",
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=16,
        )
        self.endpoint_url = endpoint_url or None
        self._client: S3Client = boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, config=config
        )
        self._part_size = part_size
        self._transfer = TransferConfig(
            multipart_threshold=part_size, multipart_chunksize=part_size, max_concurrency=4
        )

    def upload(self, path: Path, url: ObjectUrl) -> int:
        """Upload the file at `path` to `url` and return its size once the store has it whole (its
        size, and its CRC-32 where the store gives a full object's); StorageError if it has not."""
        size = path.stat().st_size
        try:
            self._client.upload_file(
                str(path),
                url.bucket,
                url.key,
                ExtraArgs={"ChecksumAlgorithm": CHECKSUM},
                Config=self._transfer,
            )
            head = self._client.head_object(Bucket=url.bucket, Key=url.key, ChecksumMode="ENABLED")
        except _failures() as exc:
            raise StorageError(f"uploading to {url}: {_why(exc)}") from None
        if head["ContentLength"] != size:
            raise StorageError(f"{url}: the store holds {head['ContentLength']} bytes of {size}")
        stored = head.get("ChecksumCRC32")
        # Each part's CRC-32 was checked by the store as it took the part; the object's is the
        # whole file's, or (in parts) the CRC-32 of the parts' ("...-16" on S3 itself).
        if stored and stored.split("-")[0] not in crc32s(path, self._part_size):
            raise StorageError(f"{url}: the store's CRC-32 {stored} is not the file's")
        return size

    def read(self, url: ObjectUrl, offset: int, length: int) -> bytes:
        """`length` bytes of the object at `url` from `offset` (one ranged GET); StorageError if
        the object or the range is not there."""
        try:
            answer = self._client.get_object(
                Bucket=url.bucket, Key=url.key, Range=f"bytes={offset}-{offset + length - 1}"
            )
            data = answer["Body"].read()
        except _failures() as exc:
            raise StorageError(f"reading {url} at {offset}: {_why(exc)}") from None
        if len(data) != length:
            raise StorageError(f"{url}: {len(data)} bytes at {offset} where {length} were asked")
        return data

    def exists(self, url: ObjectUrl) -> bool:
        """True if an object is at `url`."""
        try:
            self._client.head_object(Bucket=url.bucket, Key=url.key)
        except _failures() as exc:
            if _answered(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise StorageError(f"asking for {url}: {_why(exc)}") from None
        return True

    def writer(self, url: ObjectUrl, part_size: int = STREAM_PART) -> PartWriter:
        """A binary stream becoming the object at `url` (`with` it: completed at its end, aborted if
        it ends by an exception, so no part of it ever shows under `url`)."""
        return PartWriter(self._client, url, max(part_size, MIN_PART))

    @property
    def client(self) -> S3Client:
        """boto3's client itself."""
        return self._client


class PartWriter(io.RawIOBase):
    """A multipart upload as a writable binary stream: parts of `part_size` bytes, each with its
    CRC-32, sent as they fill; completed by `complete()` (or a `with` block's end), aborted by
    `abort()` (or an exception leaving the block)."""

    def __init__(self, client: S3Client, url: ObjectUrl, part_size: int) -> None:
        super().__init__()
        self._client = client
        self.url = url
        self._part_size = part_size
        self._buffer = bytearray()
        self._parts: list[dict[str, Any]] = []
        self._written = 0
        self._upload: str | None = None

    def __enter__(self) -> PartWriter:
        try:
            made = self._client.create_multipart_upload(
                Bucket=self.url.bucket, Key=self.url.key, ChecksumAlgorithm=CHECKSUM
            )
        except _failures() as exc:
            raise StorageError(f"beginning an upload to {self.url}: {_why(exc)}") from None
        self._upload = made["UploadId"]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.complete()
        else:
            self.abort()

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._buffer += view
        self._written += len(view)
        while len(self._buffer) >= self._part_size:
            self._send(bytes(self._buffer[: self._part_size]))
            del self._buffer[: self._part_size]
        return len(view)

    def _send(self, part: bytes) -> None:
        assert self._upload is not None, "`with` the writer first"
        number = len(self._parts) + 1
        try:
            sent = self._client.upload_part(
                Bucket=self.url.bucket,
                Key=self.url.key,
                UploadId=self._upload,
                PartNumber=number,
                Body=part,
                ChecksumAlgorithm=CHECKSUM,
            )
        except _failures() as exc:
            raise StorageError(f"uploading part {number} of {self.url}: {_why(exc)}") from None
        self._parts.append(
            {"PartNumber": number, "ETag": sent["ETag"], "ChecksumCRC32": sent["ChecksumCRC32"]}
        )

    def complete(self) -> int:
        """Send the last part and make the object; its size."""
        if self._buffer or not self._parts:  # an empty stream is one empty part
            self._send(bytes(self._buffer))
            self._buffer.clear()
        assert self._upload is not None
        try:
            self._client.complete_multipart_upload(
                Bucket=self.url.bucket,
                Key=self.url.key,
                UploadId=self._upload,
                MultipartUpload={"Parts": self._parts},  # type: ignore[typeddict-item]
            )
        except _failures() as exc:
            self.abort()
            raise StorageError(f"completing {self.url}: {_why(exc)}") from None
        self._upload = None
        return self._written

    def abort(self) -> None:
        """Drop every part sent: nothing shows under the key (a store that could not be told keeps
        the parts until its lifecycle rule for incomplete uploads removes them)."""
        if self._upload is None:
            return
        upload, self._upload = self._upload, None
        # Not told, the store still shows nothing under the key: an incomplete upload is no object.
        with contextlib.suppress(*_failures()):
            self._client.abort_multipart_upload(Bucket=self.url.bucket, Key=self.url.key, UploadId=upload)
