"""An office file's zip checked before any reader inflates it: a zip bomb is refused on its directory,
and a member that hides one behind a small declared size is caught a MiB past it.

zipfile cuts a member at the size its directory declares, and a member cut short fails its CRC; but
a reader's read() inflates up to 2 GiB in one step before cutting. So every member is first inflated
here a MiB at a time: at most what the members declare in all, which the first check bounds.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from crawler.content.documents.limits import DocumentLimits
from crawler.content.refusal import Refusal
from crawler.errors import DocumentRefused

# Members this small may compress any amount (a blank sheet's XML does 100:1); only the ratio of
# bigger ones counts.
SMALL_MEMBER = 1024 * 1024
CHUNK = 1024 * 1024


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, OSError, zlib.error)


def check_zip(body: bytes, limits: DocumentLimits) -> None:
    """Refuse `body` if its members declare more than the limits allow, are encrypted, or do not
    inflate to what they declare."""
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
            _check_directory(members, limits)
            for member in members:
                _inflate(archive, member)
    except _ZIP_ERRORS as e:
        raise DocumentRefused(Refusal.CORRUPT, f"not a readable zip: {e}") from None


def _inflate(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> None:
    try:
        with archive.open(member) as stream:
            while stream.read(CHUNK):
                pass
    except zipfile.BadZipFile as e:
        raise DocumentRefused(
            Refusal.CORRUPT,
            f"its zip member {member.filename!r} does not inflate to the size it declares "
            f"(a hidden zip bomb, or damage): {e}",
        ) from None


def _check_directory(members: list[zipfile.ZipInfo], limits: DocumentLimits) -> None:
    if len(members) > limits.max_members:
        raise DocumentRefused(
            Refusal.ZIP_BOMB, f"{len(members):,} members in its zip (at most {limits.max_members:,})"
        )
    total = sum(m.file_size for m in members)
    if total > limits.max_unzipped_bytes:
        raise DocumentRefused(
            Refusal.ZIP_BOMB,
            f"its zip inflates to {total:,} bytes (at most {limits.max_unzipped_bytes:,})",
        )
    for m in members:
        if m.flag_bits & 0x1:
            raise DocumentRefused(Refusal.ENCRYPTED, f"its zip member {m.filename!r} is encrypted")
        if m.file_size > SMALL_MEMBER and m.file_size > limits.max_ratio * max(m.compress_size, 1):
            ratio = m.file_size / max(m.compress_size, 1)
            raise DocumentRefused(
                Refusal.ZIP_BOMB,
                f"its zip member {m.filename!r} inflates {ratio:,.0f} times (at most {limits.max_ratio})",
            )
