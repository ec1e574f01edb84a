"""Log lines through the redaction door: a record's message, its arguments and its traceback alike.

A log line can quote what a session said (a memory's text, a command that failed, an LLM's error that echoes
its prompt), and an exception's traceback can too. Redacting the formatted line covers all of them at once, so
no call site has to remember; the cost is a scan per line, and the processor logs a few lines a minute.
"""

from __future__ import annotations

import logging

from processor.redaction import redact

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose every formatted record has been through ``redact``."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def redacting_formatter(fmt: str = FORMAT) -> RedactingFormatter:
    return RedactingFormatter(fmt)
