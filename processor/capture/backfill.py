"""One pass over every agent's transcripts on disk: what `engram backfill` and `engram run --once` do."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from processor.capture.discover import discover_all
from processor.capture.formats import TranscriptFormat
from processor.capture.tailer import Tailer
from processor.store import retry_when_busy

log = logging.getLogger(__name__)

Progress = Callable[[int, int, Path], None]


@dataclass
class BackfillReport:
    files: int = 0
    lines: int = 0
    messages: int = 0
    problems: int = 0


def backfill(
    tailer: Tailer,
    formats: TranscriptFormat | Sequence[TranscriptFormat],
    since_days: float | None,
    progress: Progress | None = None,
) -> BackfillReport:
    formats = [formats] if not isinstance(formats, Sequence) else list(formats)
    paths = discover_all(formats, since_days, tailer.problems)
    report = BackfillReport(files=len(paths))
    for index, path in enumerate(paths, 1):
        result = retry_when_busy(lambda p=path: tailer.tail(p), what=f"capturing {path}")
        report.lines += result.lines
        report.messages += len(result.captured)
        report.problems += result.problems
        if progress:
            progress(index, len(paths), path)
    return report
