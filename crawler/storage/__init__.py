"""Object storage: S3 and every S3-compatible store (MinIO, Ceph, R2, GCS's interoperability), through
boto3: files uploaded whole, byte ranges read back, streams written as one multipart upload."""

from crawler.storage.location import ObjectUrl, is_object_url
from crawler.storage.s3 import ObjectStore, PartWriter

__all__ = ["ObjectStore", "ObjectUrl", "PartWriter", "is_object_url"]
