"""What opening the database can refuse, importable without apsw (the CLI's error handling needs it first)."""

from __future__ import annotations


class NotEngramDatabase(Exception):
    """The file at the database path belongs to another program (or is not SQLite); the message names the fix."""
