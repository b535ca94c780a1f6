"""The WARC archive on its own: records warcio reads and checks, revisits, rendered pages, rotation,
a file cut by a killed process, and a directory that cannot be written."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crawler.archive import Archive, Archived, Exchange, read, records
from crawler.archive.exchange import payload_digest
from crawler.errors import ArchiveError

WARCIO = str(Path(sys.executable).with_name("warcio"))
URL = "http://a.test/p?x=1"
HEADERS = [("Content-Type", "text/html"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]
SENT = [("User-Agent", "crawler/test"), ("Accept-Encoding", "gzip, deflate, br")]


def exchange(body: bytes = b"<html>page</html>", status: int = 200, **more: object) -> Exchange:
    return Exchange(URL, status, HEADERS, body, SENT, datetime.now(UTC), **more)  # type: ignore[arg-type]


async def write(directory: Path, *exchanges: Exchange, max_bytes: int = 1_000_000) -> list[Archived]:
    async with Archive(directory, max_bytes=max_bytes, prefix="t") as archive:
        return [await archive.write(e) for e in exchanges]


def listed(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def size(path: Path) -> int:
    return os.stat(path).st_size


def check(path: Path) -> str:
    done = subprocess.run([WARCIO, "check", "-v", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(30)
async def test_a_response_keeps_the_decoded_payload_and_renames_the_headers_that_described_its_coding(
    tmp_path: Path,
) -> None:
    (where,) = await write(tmp_path, exchange())
    path = tmp_path / where.file
    assert "digest pass" in check(path)
    kinds = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in records(path)]
    assert kinds == [("warcinfo", None), ("response", URL), ("request", URL)]
    response, request = list(records(path))[1:]
    assert response.http_headers.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert response.http_headers.get_header("X-Crawler-Transfer-Encoding") == "chunked"
    assert response.http_headers.get_header("Content-Encoding") is None
    assert response.http_headers.get_header("Content-Length") == "17"
    assert request.http_headers.protocol == "GET" and request.http_headers.statusline == "/p?x=1 HTTP/1.1"
    assert request.http_headers.get_header("Host") == "a.test"
    assert request.rec_headers.get_header("WARC-Concurrent-To") == response.rec_headers.get_header(
        "WARC-Record-ID"
    )
    stored = read(tmp_path, where)
    assert (stored.status, stored.body, stored.content_type) == (200, b"<html>page</html>", "text/html")
    assert (
        where.digest
        == payload_digest(b"<html>page</html>")
        == response.rec_headers.get_header("WARC-Payload-Digest")
    )


@pytest.mark.timeout(30)
async def test_revisits_refer_to_the_stored_record_and_a_changed_payload_is_a_response(
    tmp_path: Path,
) -> None:
    (first,) = await write(tmp_path / "1", exchange())
    same, not_modified, changed = await write(
        tmp_path / "2",
        exchange(previous=first),
        exchange(b"", 304, previous=first),
        exchange(b"<html>new</html>", previous=first),
    )
    assert (same.revisit, not_modified.revisit, changed.revisit) == (True, True, False)
    path = tmp_path / "2" / same.file
    check(path)
    kinds = [r for r in records(path) if r.rec_type != "request"][1:]
    assert [r.rec_type for r in kinds] == ["revisit", "revisit", "response"]
    profiles = [r.rec_headers.get_header("WARC-Profile") for r in kinds[:2]]
    assert profiles == [
        "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest",
        "http://netpreserve.org/warc/1.1/revisit/server-not-modified",
    ]
    for revisit in kinds[:2]:
        assert revisit.rec_headers.get_header("WARC-Refers-To-Date") == first.date
        assert revisit.rec_headers.get_header("WARC-Payload-Digest") == first.digest
    assert read(tmp_path / "2", changed).body == b"<html>new</html>"


@pytest.mark.timeout(30)
async def test_a_rendered_page_adds_its_dom_as_a_conversion_of_the_response(tmp_path: Path) -> None:
    (where,) = await write(tmp_path, exchange(b"<html>raw</html>", rendered=b"<html>dom</html>"))
    found = list(records(tmp_path / where.file))
    response, conversion = found[1], found[2]
    assert conversion.rec_type == "conversion"
    assert conversion.rec_headers.get_header("WARC-Refers-To") == response.rec_headers.get_header(
        "WARC-Record-ID"
    )
    stored = read(tmp_path, where)
    assert (stored.body, stored.rendered) == (b"<html>raw</html>", b"<html>dom</html>")
    # A fetch service that sent only its DOM: the response says it holds no body.
    (dom_only,) = await write(tmp_path / "api", exchange(b"", raw=False, rendered=b"<html>dom</html>"))
    response = list(records(tmp_path / "api" / dom_only.file))[1]
    assert response.rec_headers.get_header("WARC-Truncated") == "unspecified"
    assert read(tmp_path / "api", dom_only).rendered == b"<html>dom</html>"


@pytest.mark.timeout(30)
async def test_files_rotate_past_max_bytes_and_a_new_archive_never_appends(tmp_path: Path) -> None:
    body = os.urandom(10_000)  # gzip cannot shrink it
    written = await write(tmp_path, *(exchange(body) for _ in range(6)), max_bytes=25_000)
    names = [w.file for w in written]
    assert len(set(names)) == 3 and names == sorted(names)
    for name in set(names):
        assert size(tmp_path / name) <= 25_000
        assert next(r.rec_type for r in records(tmp_path / name)) == "warcinfo"
    later = await write(tmp_path, exchange())
    assert later[0].file not in names and len(listed(tmp_path)) == 4
    # The file being written is named `.open` until it is closed: what a copy elsewhere leaves alone.
    async with Archive(tmp_path / "live", max_bytes=25_000, prefix="t") as archive:
        first = await archive.write(exchange(body))
        assert listed(tmp_path / "live") == [first.file + ".open"]
        assert read(tmp_path / "live", first).body == body
        await archive.write(exchange(body))
        await archive.write(exchange(body))  # rotates: the first file is closed
        names = listed(tmp_path / "live")
        assert names[0] == first.file and names[1].endswith(".warc.gz.open")
    assert not any(name.endswith(".open") for name in listed(tmp_path / "live"))


@pytest.mark.timeout(30)
async def test_a_file_cut_mid_record_reads_to_the_cut_with_a_warning_and_the_cut_record_is_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole, cut = await write(tmp_path, exchange(b"<html>one</html>"), exchange(os.urandom(5_000)))
    path = tmp_path / whole.file
    path.write_bytes(path.read_bytes()[: cut.offset + cut.length // 2])  # killed while writing
    with caplog.at_level(logging.WARNING):
        kinds = [r.rec_type for r in records(path)]
    assert kinds == ["warcinfo", "response", "request"]
    assert f"the record at byte {cut.offset} is cut" in caplog.text
    assert read(tmp_path, whole).body == b"<html>one</html>"
    with pytest.raises(ArchiveError, match="is cut"):
        read(tmp_path, cut)
    with pytest.raises(ArchiveError, match="cannot read"):
        read(tmp_path, Archived("gone.warc.gz", 0, 10, "sha1:X", "2026-01-01T00:00:00Z"))


@pytest.mark.timeout(30)
async def test_headers_a_record_cannot_hold_as_sent_are_made_writable(tmp_path: Path) -> None:
    hostile = [("Content-Type", "text/html"), ("X-Bytes", "caf\udce9"), ("X-Lines", "a\r\nSet-Cookie: x")]
    (where,) = await write(tmp_path, Exchange(URL, 200, hostile, b"ok", SENT, datetime.now(UTC)))
    stored = read(tmp_path, where)
    # warcio writes a header that is not ASCII percent-encoded.
    assert ("X-Bytes", "caf%EF%BF%BD") in stored.headers and ("X-Lines", "a  Set-Cookie: x") in stored.headers
    check(tmp_path / where.file)


@pytest.mark.timeout(30)
async def test_a_failed_write_is_an_archive_error_and_the_next_write_begins_a_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Archive(tmp_path, max_bytes=1_000_000, prefix="t") as archive:
        first = await archive.write(exchange(b"<html>one</html>"))

        def full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(ArchiveError, match="No space left on device"):
            await archive.write(exchange(b"<html>two</html>"))
        monkeypatch.undo()
        third = await archive.write(exchange(b"<html>three</html>"))
    assert third.file != first.file
    assert listed(tmp_path) == sorted([first.file + ".open", third.file])
    assert read(tmp_path, first).body == b"<html>one</html>"
    assert read(tmp_path, third).body == b"<html>three</html>"


@pytest.mark.timeout(30)
async def test_a_directory_that_cannot_be_written_is_an_archive_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ArchiveError, match="cannot write to the archive directory"):
        await write(tmp_path / "file" / "archive", exchange())
    # A worker checks first, and says what to do.
    with pytest.raises(ArchiveError, match=r"cannot make the archive directory .*set CRAWLER_ARCHIVE_DIR"):
        Archive(tmp_path / "file" / "archive", max_bytes=1_000_000, prefix="t").check()
    Archive(tmp_path / "fine", max_bytes=1_000_000, prefix="t").check()
    assert (tmp_path / "fine").is_dir()


def _bomb(path: Path, payload: int) -> int:
    """A WARC file of one response record whose `payload` bytes of zeros are one gzip member: ~1000
    times smaller on disk than inflated. Its size."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n"
    head = (
        "WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: http://a.test/bomb\r\n"
        "WARC-Date: 2026-01-01T00:00:00Z\r\n"
        "WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000001>\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http) + payload}\r\n\r\n"
    ).encode()
    gzip = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS + 16)
    with path.open("wb") as f:
        f.write(gzip.compress(head + http))
        zeros = bytes(1 << 20)
        for _ in range(payload >> 20):
            f.write(gzip.compress(zeros))
        f.write(gzip.compress(b"\r\n\r\n") + gzip.flush())
    return size(path)


@pytest.mark.timeout(60)
def test_a_record_is_inflated_up_to_its_limit_never_past_it(tmp_path: Path) -> None:
    from crawler.archive.source import ArchiveSource
    from crawler.reparse.records import ArchiveFile

    name = "t-bomb.warc.gz"
    stored = _bomb(tmp_path / name, 150 * 2**20)
    assert stored < 200_000  # ~146 KB on disk for 150 MB inflated
    archived = Archived(name, 0, stored, "sha1:X", "2026-01-01T00:00:00Z")
    limit = 5_000_000 + 65_536  # a domain's max_body_bytes and the headers' room
    with (
        ArchiveFile(ArchiveSource(tmp_path), name) as file,
        pytest.raises(ArchiveError, match=f"inflates past {limit}"),
    ):
        file.answer(archived, limit)  # reparse's fast path
    with pytest.raises(ArchiveError, match=f"inflates past {limit}"):
        read(tmp_path, archived, limit)  # the reader every other path takes


async def test_a_file_name_from_the_database_is_read_only_inside_the_archive(tmp_path: Path) -> None:
    from crawler.archive.source import ArchiveSource
    from crawler.reparse.records import ArchiveFile

    outside, archive = tmp_path / "outside", tmp_path / "archive"
    (archived,) = await write(outside, exchange())
    archive.mkdir()
    for name in (f"../outside/{archived.file}", str(outside / archived.file), "..", ""):
        row = Archived(name, archived.offset, archived.length, archived.digest, archived.date)
        with pytest.raises(ArchiveError, match="is not a file name of the archive"):
            read(archive, row)
        source = ArchiveSource(archive)
        with ArchiveFile(source, name) as file, pytest.raises(ArchiveError, match="not a file name"):
            file.answer(row, 1_000_000)
    assert read(outside, archived).body == b"<html>page</html>"  # the same row, in its own directory


@pytest.mark.timeout(30)
async def test_a_row_pointing_inside_a_record_is_an_archive_error_whatever_its_bytes_parse_as(
    tmp_path: Path,
) -> None:
    from crawler.archive.source import ArchiveSource
    from crawler.reparse.records import ArchiveFile

    (archived,) = await write(tmp_path, exchange(os.urandom(3_000)))
    # A line of five words is an ARC record's header to warcio: deflated bytes may make one.
    name, line = "t-arc.warc", b"\x8b\x08 127.0.0.1 2026 text/html 4\n\x00\x01\x02\x03\n"
    (tmp_path / name).write_bytes(line)
    rows = [Archived(name, 0, len(line), "sha1:X", "2026-01-01T00:00:00Z")] + [
        Archived(archived.file, archived.offset + shift, archived.length - shift, "sha1:X", archived.date)
        for shift in range(1, 64)
    ]
    with ArchiveFile(ArchiveSource(tmp_path), archived.file) as file:
        for row in rows:
            with pytest.raises(ArchiveError):
                read(tmp_path, row)
            with pytest.raises(ArchiveError):
                file.answer(row, 1_000_000)
