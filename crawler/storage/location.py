"""Where an object is: `s3://bucket/key`, checked as S3 names its buckets."""

from __future__ import annotations

import re
from dataclasses import dataclass

from crawler.errors import ConfigError

SCHEME = "s3://"
# S3's rule for new buckets (and MinIO's, R2's): 3-63 lower-case letters, digits, '.' and '-'.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def is_object_url(text: str) -> bool:
    """True if `text` names object storage (s3://...) rather than a local path."""
    return text.strip().lower().startswith(SCHEME)


@dataclass(frozen=True, slots=True)
class ObjectUrl:
    """A bucket and a key (or a key prefix, for a place many objects go under)."""

    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, text: str, what: str = "an object URL") -> ObjectUrl:
        """`s3://bucket/key` split; ConfigError, naming `what`, if it is not one."""
        text = text.strip()
        if not is_object_url(text):
            raise ConfigError(f"{what} {text!r}: not an object URL; write s3://BUCKET/KEY")
        bucket, _, key = text[len(SCHEME) :].partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                f"{what} {text!r}: {bucket!r} is not a bucket name (3-63 lower-case letters, digits, "
                "'.' and '-', beginning and ending with a letter or digit)"
            )
        if "//" in key or key.startswith("/") or any(ord(c) < 32 for c in key):
            raise ConfigError(f"{what} {text!r}: the key has an empty part or a control character")
        return cls(bucket, key)

    def child(self, name: str) -> ObjectUrl:
        """The object `name` under this one taken as a prefix (`a/b` + `c` is `a/b/c`)."""
        return ObjectUrl(self.bucket, f"{self.key.rstrip('/')}/{name}" if self.key.strip("/") else name)

    @property
    def name(self) -> str:
        """The key's last part."""
        return self.key.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"
