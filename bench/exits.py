"""A plain-HTTP forward proxy whose upstream connections leave from a chosen loopback address: an exit.

The gateway bench and the gateway tests both stand exits up with it, so a site sees one client address
per exit. Like the commercial proxies an exit stands for, it keeps its client's connection open between
requests (HTTP/1.1 keep-alive); each request goes upstream on a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

CHUNK = 65536
BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
BODYLESS = frozenset({204, 304})
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux's value


class Unframed(Exception):
    """A message this relay cannot delimit, or a request it does not serve."""


def _headers(block: bytes) -> tuple[bytes, list[bytes], dict[bytes, bytes]]:
    """(first line, header lines, lower-cased name -> value) of a message head."""
    line, *lines = block.rstrip(b"\r\n").split(b"\r\n")
    fields = {}
    for h in lines:
        name, _, value = h.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return line, lines, fields


def _keep(fields: dict[bytes, bytes], version: bytes) -> bool:
    connection = fields.get(b"connection", b"").lower()
    return b"close" not in connection and (version == b"HTTP/1.1" or b"keep-alive" in connection)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while n > 0:
        chunk = await reader.read(min(n, CHUNK))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", n)
        writer.write(chunk)
        n -= len(chunk)
        await writer.drain()


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        writer.write(size_line)
        size = int(size_line.split(b";")[0].strip() or b"x", 16)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                writer.write(trailer)
            writer.write(b"\r\n")
            await writer.drain()
            return
        await _copy(reader, writer, size + 2)  # the chunk and its CRLF


async def connect_from(
    host: str, port: int, source: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to host:port leaving from `source`, its port chosen at connect time: a port bound
    first would have to be free of every earlier connection's TIME_WAIT, and a busy exit runs out."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str, head: bytes) -> bool:
    """Forward one absolute-URI request (`head`, read already; its body still in `reader`) from
    `source`; True if the client's connection can carry another request. A 502 if it cannot be sent."""
    answering = False
    try:
        line, lines, fields = _headers(head)
        method, target, version = line.decode("latin-1").split(" ")
        if not target.startswith("http://"):
            raise Unframed(f"not an absolute http URI: {target[:100]!r}")
        if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            raise Unframed("chunked request bodies are not relayed")
        sent = int(fields.get(b"content-length", b"0"))
        hostport, _, path = target.removeprefix("http://").partition("/")
        host, _, port = hostport.rpartition(":")
        up_reader, up_writer = await connect_from(host.strip("[]"), int(port), source)
        try:
            kept = [h for h in lines if not h.lower().startswith((b"proxy-", b"connection", b"keep-alive"))]
            up_writer.write(f"{method} /{path} {version}\r\n".encode("latin-1") + b"\r\n".join(kept))
            up_writer.write(b"\r\nConnection: close\r\n\r\n")
            await _copy(reader, up_writer, sent)
            await up_writer.drain()
            answer = await up_reader.readuntil(b"\r\n\r\n")
            status_line, answer_lines, answer_fields = _headers(answer)
            status = int(status_line.split(b" ")[1])
            chunked = b"chunked" in answer_fields.get(b"transfer-encoding", b"").lower()
            length = answer_fields.get(b"content-length")
            bodyless = method == "HEAD" or status in BODYLESS or 100 <= status < 200
            framed = bodyless or chunked or length is not None
            again = framed and _keep(fields, version.encode("latin-1"))
            forwarded = [h for h in answer_lines if not h.lower().startswith((b"connection", b"keep-alive"))]
            answering = True
            writer.write(
                status_line
                + b"\r\n"
                + b"".join(h + b"\r\n" for h in forwarded)
                + (b"" if again else b"Connection: close\r\n")
                + b"\r\n"
            )
            if chunked and not bodyless:
                await _copy_chunked(up_reader, writer)
            elif length is not None and not bodyless:
                await _copy(up_reader, writer, int(length))
            elif not framed:
                while chunk := await up_reader.read(CHUNK):
                    writer.write(chunk)
                    await writer.drain()
            await writer.drain()
            return again
        finally:
            up_writer.close()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, Unframed):
        if not answering:  # part of an answer already went: the client sees the connection end
            with contextlib.suppress(OSError):
                writer.write(BAD_GATEWAY)
        return False


async def serve_client(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    source: str,
    on_request: Callable[[], None] | None = None,
) -> None:
    """Relay the requests of one client connection from `source`, for as long as it is kept alive."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed between requests
            if on_request is not None:
                on_request()
            if not await relay(reader, writer, source, head):
                return
    except (OSError, asyncio.LimitOverrunError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
