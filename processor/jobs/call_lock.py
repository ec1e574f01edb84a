"""One LLM call at a time per user: a lock for this process's threads and an flock shared by every process.

`engram run`, `engram extract` and anything else that calls a backend hold it around the call, so
two Engram processes of one user never call an LLM at once (seed 000), and the budget check and the
cost ledger of a call happen under it too: no other process can spend between the check and the
record. The lock file lives in the private run folder; the kernel releases an flock when its holder
dies, so a killed process never leaves it held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from processor.files import ensure_private_dir

LOCK_FILE = "llm.lock"

_THREADS = threading.Lock()  # flock is per open file description: threads of one process need their own lock


@contextlib.contextmanager
def llm_call_lock(run_dir: Path) -> Iterator[None]:
    """Hold the user's one LLM call slot (waiting for it as long as another call takes)."""
    with _THREADS:
        ensure_private_dir(run_dir)
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock
