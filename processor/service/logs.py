"""Logging to $ENGRAM_HOME/logs/engram.log (rotated) and to stderr, every line redacted (`processor.redaction`)."""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import sys
from typing import TextIO

from processor.config import Settings, ensure_private_dir
from processor.redaction.logs import redacting_formatter


class _StderrCopyHandler(logging.StreamHandler[TextIO]):
    """Writes to its own copy of file descriptor 2, closed with the handler.

    llama.cpp's quiet model load (llama-cpp-python's `suppress_stdout_stderr`) points fd 2 at
    /dev/null for the whole process while it loads; a line another thread logged to stderr then
    was lost from the journal (it was still in the log file). A copy made before keeps its target.
    """

    def __init__(self, fd: int) -> None:
        super().__init__(io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0), encoding="utf-8",
                                          errors="backslashreplace", line_buffering=True))

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            super().close()


def _stderr_handler() -> logging.Handler:
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # a stderr with no descriptor (a test's capture): itself
        return logging.StreamHandler(sys.stderr)
    return _StderrCopyHandler(fd)


def setup_logging(settings: Settings, *, to_file: bool = True, to_stderr: bool = True) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(settings.log_level.upper())
    formatter = redacting_formatter()
    if to_file:
        ensure_private_dir(settings.logs_dir)
        file_handler = logging.handlers.RotatingFileHandler(
            settings.logs_dir / "engram.log",
            maxBytes=settings.log_max_bytes,
            backupCount=settings.log_backups,
            encoding="utf-8",
        )
        file_handler.setFormatter(formatter)
        root.addHandler(file_handler)
    if to_stderr:
        stream = _stderr_handler()
        stream.setFormatter(formatter)
        root.addHandler(stream)
