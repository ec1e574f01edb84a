"""Writing Engram's files safely: private folders, and whole-file replacement no reader sees half-done."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def ensure_private_dir(path: Path) -> Path:
    """Create a directory readable by the owner only (0700) and fix a looser existing one."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o600, keep_existing: bool = False,
                 durable: bool = False) -> None:
    """Replace ``path`` with ``data`` through a temp file in the same folder and a rename.

    A reader sees the old file or the new one, never half of either. The temp file has ``mode``
    from its first byte (0600: most of what Engram writes is private). ``keep_existing`` is for
    other programs' files (Claude Code's settings): the write goes through a symlink to its target
    and keeps the existing file's mode and owner. ``durable`` fsyncs before the rename, for files
    that must survive an OS crash, not just a process crash.
    """
    target = Path(os.path.realpath(path)) if keep_existing else path
    st: os.stat_result | None = None
    if keep_existing:
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            st = target.stat()
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), (st.st_mode & 0o7777) if st else mode)
            if st is not None:
                with contextlib.suppress(PermissionError):  # only root can give a file away
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
