"""Logging to $ENGRAM_HOME/logs/engram.log (rotated) and to stderr, every line redacted (`processor.redaction`)."""

from __future__ import annotations

import logging
import logging.handlers
import sys

from processor.config import Settings, ensure_private_dir
from processor.redaction.logs import redacting_formatter


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
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(formatter)
        root.addHandler(stream)
