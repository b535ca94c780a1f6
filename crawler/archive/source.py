"""Where an archived record is read from: a file of the local directory (for an archive in object
storage, the spool its files wait in until uploaded), else the object its row names, by a ranged GET."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from crawler.archive.exchange import Archived
from crawler.archive.writer import OPEN
from crawler.errors import ArchiveError, StorageError
from crawler.settings import Settings
from crawler.storage import ObjectStore, ObjectUrl, is_object_url


@lru_cache(maxsize=8)
def store_at(endpoint_url: str | None) -> ObjectStore:
    """The process's one client of an endpoint (boto3's clients are thread-safe)."""
    return ObjectStore(endpoint_url)


def local_name(file: str) -> str:
    """A row's `warc_file` as the file's name in a local directory (an object's last key part)."""
    return file.rsplit("/", 1)[-1] if is_object_url(file) else file


def located(directory: Path, name: str) -> Path:
    """The file `name` of the archive in `directory`; ArchiveError if the name (as a row of the
    database holds it) is not a plain file name there, such as `../x` or `/etc/passwd`."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ArchiveError(f"{name[:200]!r} is not a file name of the archive: not read")
    return directory / name


@dataclass(frozen=True, slots=True)
class ArchiveSource:
    """The local directory records are looked for first, and the endpoint of the objects rows name."""

    directory: Path
    endpoint_url: str | None = None

    @classmethod
    def of(cls, settings: Settings) -> ArchiveSource:
        """Where `settings` say the archive is: its directory, or its spool and object store."""
        if is_object_url(settings.archive_dir):
            return cls(Path(settings.archive_spool), settings.s3_endpoint_url)
        return cls(Path(settings.archive_dir), settings.s3_endpoint_url)

    def local(self, file: str) -> Path | None:
        """The local file a row's `warc_file` names (finished or still `.open`), if it is here;
        ArchiveError if the name is not a plain file name of the archive."""
        first = located(self.directory, local_name(file))
        for path in (first, first.with_name(first.name + OPEN)):
            if path.exists():
                return path
        return None

    def where(self, file: str) -> str:
        """Where a file is read from, for messages."""
        path = self.local(file)
        if path is not None or not is_object_url(file):
            return str(path or self.directory / file)
        return file

    def record(self, archived: Archived) -> bytes:
        """The bytes of the records `archived` points at; ArchiveError if they are not all there."""
        path = self.local(archived.file)
        if path is None and is_object_url(archived.file):
            try:
                url = ObjectUrl.parse(archived.file, "warc_file")
                return store_at(self.endpoint_url).read(url, archived.offset, archived.length)
            except (StorageError, ArchiveError) as exc:
                raise ArchiveError(str(exc)) from None
            except Exception as exc:  # a ConfigError from a row that is no URL after all
                raise ArchiveError(f"{archived.file}: {exc}") from None
        path = path or self.directory / archived.file
        try:
            with path.open("rb") as file:
                file.seek(archived.offset)
                data = file.read(archived.length)
        except OSError as exc:
            raise ArchiveError(f"cannot read {path}: {exc}") from None
        if len(data) < archived.length:
            raise ArchiveError(
                f"{path}: the record at {archived.offset} is cut ({len(data)} of {archived.length} bytes)"
            )
        return data
