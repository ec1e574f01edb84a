"""The control plane's two files in ``run/``: the bearer token (0600) and the port the processor listens on."""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from pathlib import Path

from processor.files import ensure_private_dir, write_atomic
from processor.hook_kit import control

log = logging.getLogger(__name__)

PORT_FILE = control.PORT_FILE  # the hooks read both too (processor/hook_kit/control.py)
TOKEN_FILE = control.TOKEN_FILE

_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]{32,256}")


def _read_private_file(path: Path) -> str | None:
    """Contents of an owner-only regular file; None if missing, a symlink, or readable by others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        return fh.read(4096).decode("ascii", "replace").strip()


def ensure_token(run_dir: Path) -> str:
    """The control token, creating ``run/token`` (0600) if missing.

    A token file that others could read (group/world bits, another owner, a symlink) may have leaked,
    so it is not tightened in place but replaced by a new random token, and the fix is logged.
    """
    ensure_private_dir(run_dir)
    path = run_dir / TOKEN_FILE
    reason = None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            reason = "was not a regular file"
        elif st.st_uid != os.getuid():
            reason = f"was owned by uid {st.st_uid}"
        elif st.st_mode & 0o077:
            reason = f"was readable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        else:
            token = _read_private_file(path)
            if token is not None and _TOKEN_CHARS.fullmatch(token):
                return token
            reason = "did not contain a valid token"
    token = secrets.token_urlsafe(32)
    write_atomic(path, token + "\n", durable=True)
    if reason:
        log.warning("%s %s; replaced it with a new private token (mode 600)", path, reason)
    else:
        log.info("created control token %s", path)
    return token


def read_token(run_dir: Path) -> str | None:
    """The token as a client sees it (never created or repaired here); None if missing or unsafe."""
    token = _read_private_file(run_dir / TOKEN_FILE)
    return token if token and _TOKEN_CHARS.fullmatch(token) else None


def read_port(run_dir: Path) -> int | None:
    try:
        text = (run_dir / PORT_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None
