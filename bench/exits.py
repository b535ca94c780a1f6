"""A plain-HTTP forward proxy whose upstream connections leave from a chosen loopback address: an exit.

The gateway bench and the gateway tests both stand exits up with it, so a site sees one client address
per exit.
"""

from __future__ import annotations

import asyncio
import contextlib


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str, head: bytes) -> None:
    """Forward one absolute-URI request (`head`, read already) from `source`; 502 if it cannot be."""
    try:
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.decode().split(" ")
        if not target.startswith("http://"):
            raise ValueError(f"not an absolute http URI: {target[:100]!r}")
        hostport, _, path = target.removeprefix("http://").partition("/")
        host, _, port = hostport.rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(
            host.strip("[]"), int(port), local_addr=(source, 0)
        )
        headers = [
            h for h in rest.split(b"\r\n") if h and not h.lower().startswith((b"proxy-", b"connection"))
        ]
        up_writer.write(f"{method} /{path} {version}\r\n".encode() + b"\r\n".join(headers))
        up_writer.write(b"\r\nConnection: close\r\n\r\n")
        await up_writer.drain()
        while chunk := await up_reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        up_writer.close()
    except (OSError, asyncio.IncompleteReadError, ValueError):
        with contextlib.suppress(OSError):
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


async def serve_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str) -> None:
    """One request per client connection, relayed from `source`; the connection is closed after."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        await relay(reader, writer, source, head)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
