"""Single instance: one `engram run` per ENGRAM_HOME, enforced by an flock on ``run/engram.pid``.

Why an flock held for the process lifetime rather than O_CREAT|O_EXCL plus stale detection: the kernel
drops the lock when its holder dies, however it dies (SIGKILL, OOM killer, power loss), so "is the
owner still alive?" is answered by the kernel, atomically and without a check-then-remove race between
two starting instances. A leftover file from a dead instance is simply locked and overwritten.

The file still records ``<pid>\\n<start token>\\n`` (first line is the pid, so ``head -n1`` works in
shell scripts). The start token tells a live owner apart from an unrelated program that was given the
same pid later; it is used to name the running instance, to refuse the odd instance that somehow runs
without its lock, and by anyone about to signal the recorded pid (never signal a recycled pid).

Usage by the run loop::

    lock = PidFile(settings.run_dir)
    lock.acquire()          # raises AlreadyRunning(pid) if another instance holds it
    try:
        ...                 # run
    finally:
        lock.release()      # removes the file only if it is still ours
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from processor.config import ensure_private_dir
from processor.hook_kit import control

log = logging.getLogger(__name__)

PIDFILE_NAME = control.PID_FILE  # the hooks probe the same lock (processor/hook_kit/control.py)

# A client probing the lock (is_running) holds it for microseconds; a real owner holds it for its
# lifetime. Retrying briefly keeps a concurrent probe from making a starting instance give up.
_LOCK_ATTEMPTS = 5
_LOCK_RETRY_SECONDS = 0.05
# How long to wait for a fresh owner to write its pid after taking the lock.
_RECORD_WAIT_SECONDS = 0.5


EXIT_ALREADY_RUNNING = 73  # sysexits EX_CANTCREAT: `engram run` exits so when another processor holds the lock


class PidFileError(Exception):
    """The pid file cannot be used at all (not a regular file, no locking on this filesystem, ...)."""


class AlreadyRunning(PidFileError):
    """Another Engram processor holds the pid file; ``pid`` is its process id when it could be read."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"Engram is already running ({who}); its lock file is {path}")


@dataclass(frozen=True)
class PidRecord:
    """What the pid file says: who wrote it, and when that process started."""

    pid: int
    start: str | None  # process_start_token(pid) when written; None if it could not be determined

    def encode(self) -> bytes:
        return f"{self.pid}\n{self.start or ''}\n".encode()

    def is_live(self) -> bool:
        """True only if ``pid`` is alive *and* is the same process that wrote the record.

        A pid that is alive but started at another time is a recycled pid: stale. Without a recorded
        start time the two cannot be told apart, so the answer is False (never trust it enough to
        signal it).
        """
        if self.start is None:
            return False
        return process_start_token(self.pid) == self.start


def pidfile_path(run_dir: Path) -> Path:
    return run_dir / PIDFILE_NAME


@functools.cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_token(pid: int) -> str | None:
    """An opaque value that differs between two processes that had the same pid; None if ``pid`` is gone.

    Linux: boot id + start time in clock ticks from /proc/<pid>/stat (exact). Elsewhere (macOS):
    ``ps -o lstart=``, which has one-second resolution - enough, since a pid is not recycled within a
    second in practice.
    """
    if pid <= 0:
        return None
    if sys.platform.startswith("linux"):
        try:
            return parse_proc_stat(Path(f"/proc/{pid}/stat").read_bytes())[2]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, IndexError):
            pass
    return _ps_start_token(pid)


def parse_proc_stat(data: bytes) -> tuple[str, int, str]:
    """(state, ppid, start token) from the contents of /proc/<pid>/stat."""
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    # Start times count clock ticks since boot: the boot id keeps a record from before a reboot stale.
    return fields[0].decode(), int(fields[1]), f"{_boot_id()}:{fields[19].decode()}"  # fields 3, 4, 22


def lstart_token(lstart: str) -> str:
    """The start token for a ``ps -o lstart`` value (the format used where /proc is missing)."""
    return "lstart:" + " ".join(lstart.split())


def _ps_start_token(pid: int) -> str | None:
    try:
        out = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)],
            capture_output=True, text=True, timeout=5, env={**os.environ, "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return lstart_token(out.stdout) if out.returncode == 0 and out.stdout.strip() else None


def parse_record(data: bytes) -> PidRecord | None:
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines or not lines[0].strip().isdigit():
        return None
    start = lines[1].strip() if len(lines) > 1 and lines[1].strip() else None
    return PidRecord(int(lines[0].strip()), start)


def read_record(run_dir: Path) -> PidRecord | None:
    """The pid file's contents, whether or not its writer is still alive; None if missing or garbage."""
    try:
        return parse_record(pidfile_path(run_dir).read_bytes())
    except OSError:
        return None


def _wait_for_record(path: Path) -> PidRecord | None:
    # A new owner writes its record right after locking; give it a moment before saying "pid unknown".
    deadline = time.monotonic() + _RECORD_WAIT_SECONDS
    while True:
        try:
            record = parse_record(path.read_bytes())
        except OSError:
            record = None
        if record is not None or time.monotonic() >= deadline:
            return record
        time.sleep(0.02)


def is_running(run_dir: Path) -> bool:
    """Whether some process holds the instance lock right now (cheap: one open + one flock)."""
    return control.instance_running(str(pidfile_path(run_dir)))


class PidFile:
    """The instance lock for one run directory; hold it for as long as the processor runs."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = pidfile_path(run_dir)
        self._fd: int | None = None
        self._owner_pid: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> PidRecord:
        """Take the lock and record ourselves; raise AlreadyRunning if another instance holds it."""
        if self._fd is not None:
            raise PidFileError(f"{self.path} is already held by this process")
        ensure_private_dir(self.run_dir)
        fd = self._lock()
        try:
            previous = parse_record(_read_fd(fd))
            me = os.getpid()
            # Defence in depth: the lock was free, yet the recorded process is alive and is the one
            # that wrote the file (same start time). Something dropped its lock; two instances would
            # process the same transcripts, so refuse. A dead or recycled pid is stale: overwrite.
            if previous is not None and previous.pid != me and previous.is_live():
                raise AlreadyRunning(self.path, previous.pid)
            if previous is not None and previous.pid != me:
                log.info("replacing stale pid file %s (pid %d no longer runs Engram)",
                         self.path, previous.pid)
            record = PidRecord(me, process_start_token(me))
            st = os.fstat(fd)
            if stat.S_IMODE(st.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._owner_pid = me
        return record

    def _lock(self) -> int:
        busy = 0
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise PidFileError(f"cannot open {self.path}: {exc}") from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise PidFileError(f"{self.path} is not a regular file; remove it")
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                busy += 1
                if busy >= _LOCK_ATTEMPTS:
                    record = _wait_for_record(self.path)
                    raise AlreadyRunning(self.path, record.pid if record else None) from None
                time.sleep(_LOCK_RETRY_SECONDS)
                continue
            except PidFileError:
                os.close(fd)
                raise
            except OSError as exc:
                os.close(fd)
                raise PidFileError(
                    f"cannot lock {self.path}: {exc}; keep ENGRAM_HOME on a local filesystem"
                ) from None
            # A releasing owner unlinks the file while holding its lock; if that happened between our
            # open and flock we locked an orphaned inode while the path names a new file (or none).
            # Only a lock on the file the path names right now means anything: otherwise retry.
            if _same_file(fd, self.path):
                return fd
            os.close(fd)
        raise PidFileError(f"cannot lock {self.path}: it keeps being replaced by another process")

    def release(self) -> None:
        """Drop the lock; remove the file only if it is still the one we locked."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # A forked child inherits the descriptor but does not own the instance: never unlink there.
            if os.getpid() == self._owner_pid and _same_file(fd, self.path):
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        finally:
            # Unlink before unlocking, so the next owner always finds a fresh file to lock.
            os.close(fd)

    def __enter__(self) -> PidFile:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)
