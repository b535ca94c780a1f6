"""The content pool's wire: length-prefixed pickles between a pool and its processes, and the
restricted unpickling of what a process sends back (it has read hostile input)."""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

HEADER = struct.Struct(">Q")
# What a process may send back at most: a document's text is bounded far below this, and a bigger
# length is a process gone wrong, not a reply to allocate.
MAX_REPLY = 512 * 1024 * 1024


def frame(value: Any) -> bytes:
    """`value` pickled, after its length."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


class _Unpickler(pickle.Unpickler):
    """Builds only crawler's own classes (and the built-in types pickle needs no name for): a process
    taken over through a parser's bug cannot have its pool call os.system or the like."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "crawler" or module.startswith("crawler."):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"a content process sent {module}.{name}, which a reply may not hold")


def unpickle_reply(data: bytes) -> Any:
    """What a process sent, built only from crawler's classes and built-in values."""
    return _Unpickler(io.BytesIO(data)).load()
