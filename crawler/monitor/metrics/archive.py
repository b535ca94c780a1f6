"""What a worker wrote to its WARC archive, and its uploads of finished files to object storage."""

from __future__ import annotations

from crawler.monitor.metrics.declared import Declarations


class ArchiveMetrics:
    """Records and bytes archived, and the spool's uploads: done, failed, waiting."""

    def __init__(self, declared: Declarations) -> None:
        self.archive_records = declared.counter("crawler_archive_records")
        self.archive_bytes = declared.counter("crawler_archive_bytes")
        self.archive_uploads = declared.counter("crawler_archive_uploads")
        self.archive_uploaded_bytes = declared.counter("crawler_archive_uploaded_bytes")
        self.archive_waiting = declared.gauge("crawler_archive_files_waiting")
        self.archive_waiting_bytes = declared.gauge("crawler_archive_bytes_waiting")
        self.archive_upload_seconds = declared.histogram("crawler_archive_upload_seconds")
        # The last upload's error, "" once one succeeds: shown by `crawler status` (a text, no gauge).
        self.archive_upload_error = ""

    def observe_archived(self, domain: str, revisit: bool, nbytes: int) -> None:
        """An answer of `domain` was archived: as a revisit or a response, in `nbytes`."""
        self.archive_records.labels(domain, "revisit" if revisit else "response").inc()
        self.archive_bytes.labels(domain).inc(nbytes)

    def observe_upload(self, nbytes: int, seconds: float) -> None:
        """A WARC file is in object storage, `nbytes` long, after `seconds`."""
        self.archive_uploads.labels("uploaded").inc()
        self.archive_uploaded_bytes.inc(nbytes)
        self.archive_upload_seconds.observe(seconds)
        self.archive_upload_error = ""

    def observe_upload_failed(self, error: str) -> None:
        """A WARC file's upload failed; it stays in the spool."""
        self.archive_uploads.labels("failed").inc()
        self.archive_upload_error = error[:300]

    def observe_uploads_waiting(self, files: int, nbytes: int) -> None:
        """Finished WARC files waiting for their upload, and their size."""
        self.archive_waiting.set(files)
        self.archive_waiting_bytes.set(nbytes)
