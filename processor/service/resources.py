"""Keeping the long-running processor bounded: an RSS watchdog and a reaper for child processes.

Memory: macOS launchd cannot cap a LaunchAgent's memory, so the processor watches its own resident
set size. Above ``warn_mb`` it logs a warning; above ``limit_mb`` it asks the run loop to shut down
cleanly and exit with ``EXIT_MEMORY_LIMIT``, and the service manager starts a fresh process (launchd
KeepAlive, systemd Restart=on-failure + RestartForceExitStatus).

Children: the Claude Agent SDK starts the ``claude`` CLI, which starts tools and MCP servers of its own.
None of them may outlive the processor. ``ChildProcesses.shutdown()`` stops every descendant (found by
walking the process tree, so it also covers processes the SDK spawned without telling us) plus any pid
registered with ``track()``: SIGTERM, a grace period, SIGKILL, and reaping of our direct children.
A pid is only signalled while it still has the start time it had when it was seen, so a pid recycled
by an unrelated program is never killed.

Usage by the run loop::

    children = ChildProcesses()
    watchdog = MemoryWatchdog(warn_mb=400, limit_mb=512, on_limit=lambda rss: processor.stop())
    watchdog.start()
    try:
        processor.run()
    finally:
        watchdog.stop()
        children.shutdown(grace=5.0)
    sys.exit(EXIT_MEMORY_LIMIT if watchdog.limit_exceeded else 0)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.service.pidfile import lstart_token, parse_proc_stat, process_start_token

log = logging.getLogger(__name__)

# Exit status after a memory-limit shutdown: EX_TEMPFAIL from sysexits.h ("temporary failure, try
# again later"). Distinct from a crash (1) and from Python's usage errors (2); both unit templates
# name it so that the service manager always restarts after it.
EXIT_MEMORY_LIMIT = 75

_MB = 1024 * 1024
_POLL_SECONDS = 0.05
_LINUX = sys.platform.startswith("linux")


# --- memory ------------------------------------------------------------------------------------

# glibc's mallopt parameters (malloc.h): the number of malloc arenas, and the size from which a block is
# mapped on its own (and unmapped when freed) rather than carved out of an arena.
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3
MALLOC_ARENAS = 2
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value, kept from moving


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas; True when it took effect. Call before starting threads.

    glibc gives each thread that allocates its own arena, up to 8 per core, and memory freed in one is not
    reused by another: the processor's capture, memory, job, control-plane and MCP threads held about
    20 MB more resident memory under load than with two arenas (bench/load.py). Python's small objects
    do not go through malloc, so the extra locking is not on a hot path. Not glibc (macOS), or
    ``MALLOC_ARENA_MAX`` set in the environment: nothing to do.
    """
    return _mallopt(_M_ARENA_MAX, count, "MALLOC_ARENA_MAX")


def _mallopt(parameter: int, value: int, environment_name: str) -> bool:
    """glibc's mallopt; False off Linux or when the user set the parameter in the environment (glibc applied
    theirs), or without mallopt (musl and other C libraries)."""
    if not _LINUX or os.environ.get(environment_name):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None).mallopt(parameter, value))
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(size: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Keep blocks of ``size`` bytes and more out of the arenas, for good; True when it took effect.

    glibc starts by mapping blocks of 128 KiB and more on their own, but each time one is freed it raises
    that threshold to its size (up to 32 MB): after the vector index grew (its matrix is copied and the old
    one freed), every later block up to that size, numpy's per-query arrays included, came from the heap
    and left it fragmented: 10 MB more in use within a second under bench/load.py. Setting the threshold
    turns that adjustment off. Not glibc, or ``MALLOC_MMAP_THRESHOLD_`` set: nothing to do.
    """
    return _mallopt(_M_MMAP_THRESHOLD, size, "MALLOC_MMAP_THRESHOLD_")


def release_free_memory() -> bool:
    """Hand the free pages inside glibc's heaps back to the OS (``malloc_trim``); True when it ran.

    glibc returns memory on its own only from the top of a heap: a heap whose top chunk is live keeps
    every freed page below it resident. The processor frees plenty in the middle — a page of messages
    per episode slice, the model conversion on a first start (about 60 MB), a burst of requests — so
    the memory watchdog calls this before each sample, and RSS comes back down to what is in use.
    It costs a walk of the free chunks, about a millisecond. Not glibc: nothing to do.
    """
    if not _LINUX:
        return False
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
        return True
    except (OSError, AttributeError):  # musl and other C libraries have no malloc_trim
        return False


def rss_bytes(pid: int | None = None) -> int | None:
    """Current resident set size of ``pid`` (default: this process), or None if it cannot be read.

    Linux reads /proc/<pid>/statm. macOS has no /proc, and getrusage only reports the *peak* RSS, which
    never comes down, so it asks ``ps -o rss=`` (one short fork per sample; samples are rare).
    """
    pid = os.getpid() if pid is None else pid
    if _LINUX:
        try:
            resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            return resident_pages * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return _ps_rss_bytes(pid)


def _ps_rss_bytes(pid: int) -> int | None:
    try:
        out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return int(text) * 1024 if out.returncode == 0 and text.isdigit() else None  # ps reports KiB


class MemoryWatchdog:
    """Samples RSS every ``interval`` seconds; warns once per excursion over ``warn_mb`` and calls
    ``on_limit(rss_bytes)`` once when RSS reaches ``limit_mb``.

    ``on_limit`` should only *ask* for a clean shutdown (set the stop event); it runs on the watchdog
    thread. Afterwards ``limit_exceeded`` is True and the process should exit with EXIT_MEMORY_LIMIT.
    ``check()`` takes one sample synchronously, for a run loop that prefers to poll. ``release``, if
    given, runs before each sample (``release_free_memory``): what was freed is not counted as in use.
    """

    def __init__(
        self,
        *,
        warn_mb: float = 400,
        limit_mb: float = 512,
        on_limit: Callable[[int], None],
        interval: float = 30.0,
        sample: Callable[[], int | None] = rss_bytes,
        release: Callable[[], object] | None = None,
    ) -> None:
        if not 0 < warn_mb <= limit_mb:
            raise ValueError(f"need 0 < warn_mb ({warn_mb}) <= limit_mb ({limit_mb})")
        self.warn_bytes = int(warn_mb * _MB)
        self.limit_bytes = int(limit_mb * _MB)
        self.interval = interval
        self._on_limit = on_limit
        self._sample = sample
        self._release = release
        self._warned = False
        self._fired = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_rss: int | None = None

    @property
    def limit_exceeded(self) -> bool:
        return self._fired.is_set()

    def check(self) -> str:
        """Take one sample; returns "ok", "warn" or "limit"."""
        if self._release is not None:
            self._release()
        rss = self._sample()
        self.last_rss = rss
        if rss is None:
            return "ok"
        if rss >= self.limit_bytes:
            if not self._fired.is_set():
                self._fired.set()
                log.error("memory: RSS %.0f MB reached the %.0f MB limit; shutting down to be restarted "
                          "(exit status %d)", rss / _MB, self.limit_bytes / _MB, EXIT_MEMORY_LIMIT)
                try:
                    self._on_limit(rss)
                except Exception:
                    log.exception("memory watchdog: the shutdown callback failed")
            return "limit"
        if rss >= self.warn_bytes:
            if not self._warned:
                self._warned = True
                log.warning("memory: RSS %.0f MB is over %.0f MB (limit %.0f MB)",
                            rss / _MB, self.warn_bytes / _MB, self.limit_bytes / _MB)
            return "warn"
        self._warned = False  # back under: warn again on the next excursion
        return "ok"

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="engram-memory-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception:
                log.exception("memory watchdog: sampling failed")
            self._stop.wait(self.interval)


# --- processes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    state: str  # first letter of the ps/proc state; "Z" is a zombie: dead, waiting to be reaped
    start: str  # process_start_token() format

    @property
    def zombie(self) -> bool:
        return self.state.startswith("Z")


def process_table() -> dict[int, ProcessInfo]:
    """Every visible process: /proc on Linux, one ``ps -A`` elsewhere."""
    return _proc_process_table() if _LINUX and os.path.isdir("/proc/self") else _ps_process_table()


def _proc_process_table() -> dict[int, ProcessInfo]:
    table: dict[int, ProcessInfo] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            state, ppid, start = parse_proc_stat(Path(f"/proc/{name}/stat").read_bytes())
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        table[int(name)] = ProcessInfo(int(name), ppid, state, start)
    return table


def _ps_process_table() -> dict[int, ProcessInfo]:
    proc = subprocess.Popen(
        ["ps", "-A", "-o", "pid=,ppid=,stat=,lstart="],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "LC_ALL": "C"},
    )
    out, _ = proc.communicate(timeout=10)
    table: dict[int, ProcessInfo] = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            pid = int(parts[0])
            table[pid] = ProcessInfo(pid, int(parts[1]), parts[2], lstart_token(parts[3]))
    table.pop(proc.pid, None)  # the ps we just ran is our child too; it is gone already
    return table


def descendants(root: int, table: dict[int, ProcessInfo]) -> list[int]:
    """Pids below ``root`` in the process tree, parents before children."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: list[int] = []
    frontier = [root]
    while frontier:
        nxt = [pid for parent in frontier for pid in children.get(parent, ()) if pid != root]
        found.extend(nxt)
        frontier = nxt
    return found


@dataclass(frozen=True)
class ChildShutdown:
    terminated: list[int]  # exited after SIGTERM
    killed: list[int]  # needed SIGKILL
    survivors: list[int]  # still alive even after SIGKILL (e.g. stuck in the kernel); should be empty


class ChildProcesses:
    """The processes started on the processor's behalf; ``shutdown()`` leaves none behind.

    Children are started in the processor's own process group (no new session), so if the processor
    itself is SIGKILLed, the service manager still cleans them up (systemd kills the unit's cgroup;
    launchd kills the job's process group unless AbandonProcessGroup is set).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracked: dict[int, str | None] = {}
        self._popens: dict[int, subprocess.Popen[Any]] = {}

    def spawn(self, args: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """subprocess.Popen, tracked until it exits."""
        proc: subprocess.Popen[Any] = subprocess.Popen(args, **popen_kwargs)
        with self._lock:
            self._popens[proc.pid] = proc
        self.track(proc.pid)
        return proc

    def track(self, pid: int, start: str | None = None) -> None:
        """Register a child started elsewhere (e.g. the SDK's ``claude``); ``start`` defaults to now."""
        token = start or process_start_token(pid)
        if token is None:
            return  # already gone
        with self._lock:
            self._tracked[pid] = token

    def tracked(self) -> list[int]:
        self.reap()
        with self._lock:
            return sorted(self._tracked)

    def reap(self) -> list[int]:
        """Forget tracked processes that exited (reaping our own Popens); returns their pids.

        Never waits on pids spawned by someone else: that would steal the exit status their owner (the
        SDK's subprocess watcher) is waiting for.
        """
        gone: list[int] = []
        with self._lock:
            for pid, token in list(self._tracked.items()):
                proc = self._popens.get(pid)
                exited = proc.poll() is not None if proc is not None else process_start_token(pid) != token
                if exited:
                    gone.append(pid)
                    del self._tracked[pid]
                    self._popens.pop(pid, None)
        return gone

    def shutdown(self, grace: float = 5.0, *, kill_wait: float = 2.0,
                 include_descendants: bool = True) -> ChildShutdown:
        """SIGTERM every tracked process and (by default) every descendant, SIGKILL what is left after
        ``grace`` seconds, and reap our direct children. Safe to call more than once."""
        me = os.getpid()
        table = process_table()
        with self._lock:
            tracked = dict(self._tracked)
        targets: dict[int, str] = {}
        for pid, token in tracked.items():
            info = table.get(pid)
            if info is not None and info.start == token:
                targets[pid] = token
        if include_descendants:
            targets.update({pid: table[pid].start for pid in descendants(me, table)})
        targets.pop(me, None)
        self._reap_children(targets)
        alive = self._alive(targets)
        if not alive:
            self._forget(targets)
            return ChildShutdown([], [], [])
        log.info("stopping %d child process(es): %s", len(alive), sorted(alive))
        self._signal(alive, signal.SIGTERM)
        remaining = self._wait(alive, grace)
        killed = sorted(remaining)
        if remaining:
            log.warning("child process(es) %s ignored SIGTERM for %.1f s; sending SIGKILL", killed, grace)
            self._signal(remaining, signal.SIGKILL)
            remaining = self._wait(remaining, kill_wait)
            if remaining:
                log.error("child process(es) %s survived SIGKILL", sorted(remaining))
        self._forget(targets)
        terminated = sorted(set(alive) - set(killed))
        return ChildShutdown(terminated, killed, sorted(remaining))

    def _signal(self, targets: dict[int, str], sig: signal.Signals) -> None:
        table = process_table()
        for pid, token in targets.items():
            info = table.get(pid)
            if info is None or info.start != token or info.zombie:
                continue  # gone, or the pid now belongs to someone else
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _wait(self, targets: dict[int, str], timeout: float) -> dict[int, str]:
        deadline = time.monotonic() + timeout
        while True:
            alive = self._alive(targets)
            # Reap after looking: whatever was seen dead is a zombie by now and is collected here.
            self._reap_children(targets)
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(_POLL_SECONDS)

    def _alive(self, targets: dict[int, str]) -> dict[int, str]:
        table = process_table()
        return {pid: token for pid, token in targets.items()
                if (info := table.get(pid)) is not None and info.start == token and not info.zombie}

    def _reap_children(self, pids: Iterable[int]) -> None:
        # Direct children linger as zombies until waited for; grandchildren are reaped by their parent
        # or, once it is gone, by init.
        with self._lock:
            popens = dict(self._popens)
        for pid in pids:
            proc = popens.get(pid)
            if proc is not None:
                proc.poll()  # reaps and records the return code on the Popen
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)

    def _forget(self, pids: Iterable[int]) -> None:
        with self._lock:
            for pid in pids:
                proc = self._popens.get(pid)
                if proc is None or proc.returncode is not None:
                    self._tracked.pop(pid, None)
                    self._popens.pop(pid, None)
