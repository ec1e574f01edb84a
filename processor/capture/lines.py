"""Reading complete lines from a growing file, by byte offset.

Only lines that end in a newline are returned: a partial last line is still
being written and waits for the next read. A line longer than the limit is not
held in memory; it is reported as oversized and skipped past.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class Line:
    offset: int  # where the line starts in the file
    end: int  # offset just past its newline
    data: bytes | None  # None when the line was longer than the limit


def read_complete_lines(f: BinaryIO, offset: int, *, chunk_size: int, max_line_bytes: int) -> Iterator[Line]:
    f.seek(offset)
    pending = bytearray()
    pending_start = offset
    oversized = False
    position = offset
    while True:
        chunk = f.read(chunk_size)
        if not chunk:
            return  # EOF: whatever is pending is an incomplete line
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                break
            if oversized or len(pending) + newline - start > max_line_bytes:
                yield Line(pending_start, position + newline + 1, None)
            elif pending:
                pending += chunk[start:newline]
                yield Line(pending_start, position + newline + 1, bytes(pending))
            else:
                yield Line(position + start, position + newline + 1, chunk[start:newline])
            pending.clear()
            oversized = False
            start = newline + 1
            pending_start = position + start
        rest = len(chunk) - start
        if rest:
            if oversized or len(pending) + rest > max_line_bytes:
                oversized = True
                pending.clear()  # too long to keep: remember only that we are inside it
            else:
                pending += chunk[start:]
        position += len(chunk)
