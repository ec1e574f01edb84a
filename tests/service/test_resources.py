"""Resource limits: RSS is measured and acted on; no child process outlives the processor."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from processor.service.resources import (
    EXIT_MEMORY_LIMIT,
    ChildProcesses,
    MemoryWatchdog,
    _proc_process_table,
    _ps_process_table,
    _ps_rss_bytes,
    descendants,
    process_table,
    rss_bytes,
)

MB = 1024 * 1024

# A child that ignores SIGTERM and says when it is ready to be killed.
STUBBORN = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
""")
# A child with a grandchild, as the claude CLI has MCP servers and tools under it.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen(["sleep", "60"])
    print(child.pid, flush=True)
    time.sleep(60)
""")


def gone(pid: int) -> bool:
    """Not running any more: no such pid, or a zombie (dead, its parent has not collected it yet)."""
    info = process_table().get(pid)
    return info is None or info.zombie


@pytest.fixture
def children() -> Iterator[ChildProcesses]:
    registry = ChildProcesses()
    yield registry
    registry.shutdown(grace=0.2, kill_wait=1.0)  # never leave a test's processes behind


# --- memory ---


def test_rss_is_measured_and_follows_allocation() -> None:
    before = rss_bytes()
    assert before is not None and before > 5 * MB
    ballast = b"x" * (64 * MB)  # b"x" * n touches every page, so they are resident
    after = rss_bytes()
    assert after is not None and after - before > 48 * MB
    del ballast


def test_ps_fallback_measures_rss() -> None:
    # macOS has no /proc: `ps -o rss=` must agree with /proc within a few MB.
    by_ps, by_proc = _ps_rss_bytes(os.getpid()), rss_bytes()
    assert by_ps is not None and by_proc is not None
    assert abs(by_ps - by_proc) < 16 * MB


def test_watchdog_warns_once_then_asks_for_shutdown_once(caplog: pytest.LogCaptureFixture) -> None:
    samples = iter([100 * MB, 450 * MB, 460 * MB, 300 * MB, 420 * MB, 600 * MB, 700 * MB])
    limits: list[int] = []
    watchdog = MemoryWatchdog(warn_mb=400, limit_mb=512, on_limit=limits.append, sample=lambda: next(samples))
    with caplog.at_level(logging.WARNING):
        states = [watchdog.check() for _ in range(7)]
    assert states == ["ok", "warn", "warn", "ok", "warn", "limit", "limit"]
    assert limits == [600 * MB]  # once, even though the next sample is higher still
    assert watchdog.limit_exceeded
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2  # one per excursion
    assert f"exit status {EXIT_MEMORY_LIMIT}" in caplog.text


def test_watchdog_thread_triggers_shutdown() -> None:
    fired = threading.Event()
    watchdog = MemoryWatchdog(warn_mb=1, limit_mb=2, on_limit=lambda rss: fired.set(), interval=0.01)
    watchdog.start()
    try:
        assert fired.wait(5)  # the real RSS of this test process is far over 2 MB
    finally:
        watchdog.stop()
    assert watchdog.limit_exceeded and watchdog.last_rss and watchdog.last_rss > 2 * MB


def test_watchdog_survives_unreadable_rss_and_bad_callbacks() -> None:
    assert MemoryWatchdog(on_limit=print, sample=lambda: None).check() == "ok"

    def broken(rss: int) -> None:
        raise RuntimeError("callback bug")

    watchdog = MemoryWatchdog(warn_mb=1, limit_mb=1, on_limit=broken, sample=lambda: 10 * MB)
    assert watchdog.check() == "limit" and watchdog.limit_exceeded
    with pytest.raises(ValueError):
        MemoryWatchdog(warn_mb=600, limit_mb=512, on_limit=print)


def test_memory_exit_status_is_distinct() -> None:
    assert EXIT_MEMORY_LIMIT not in (0, 1, 2) and 0 < EXIT_MEMORY_LIMIT < 126


# --- children ---


def test_shutdown_stops_every_child_including_stubborn_ones(children: ChildProcesses) -> None:
    sleepers = [children.spawn(["sleep", "60"]) for _ in range(2)]
    stubborn = children.spawn([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline().strip() == "ready"
    started = time.monotonic()
    report = children.shutdown(grace=0.5, kill_wait=2.0)
    assert time.monotonic() - started < 3
    assert report.killed == [stubborn.pid]
    assert set(report.terminated) >= {p.pid for p in sleepers}
    assert report.survivors == []
    for proc in [*sleepers, stubborn]:
        assert proc.returncode is not None  # reaped: no zombie left behind
        assert gone(proc.pid)
    assert stubborn.returncode == -signal.SIGKILL
    assert all(p.returncode == -signal.SIGTERM for p in sleepers)
    assert children.tracked() == []
    assert children.shutdown(grace=0.1) == type(report)([], [], [])  # idempotent


def test_shutdown_reaches_grandchildren_and_untracked_children(children: ChildProcesses) -> None:
    # Spawned behind our back (as the Agent SDK starts `claude`), with a grandchild of its own.
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    assert grandchild in descendants(os.getpid(), process_table())
    report = children.shutdown(grace=1.0)
    assert {parent.pid, grandchild} <= set(report.terminated)
    assert gone(parent.pid) and gone(grandchild)
    parent.stdout.close()
    # The registry reaped this untracked child itself (no zombie); its Popen just cannot see the status.
    parent.wait(timeout=1)


def test_tracked_pid_is_stopped_without_walking_the_tree(children: ChildProcesses) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    children.track(proc.pid)
    report = children.shutdown(grace=1.0, include_descendants=False)
    assert report.terminated == [proc.pid]
    assert gone(proc.pid)
    # Reaped by the registry (no zombie), so this Popen may see status 0 instead of -SIGTERM.
    proc.wait(timeout=1)


def test_recycled_pid_is_never_signalled(children: ChildProcesses) -> None:
    # The registry saw this pid with another start time: it now belongs to someone else.
    proc = subprocess.Popen(["sleep", "60"])
    try:
        children.track(proc.pid, start="an earlier process")
        report = children.shutdown(grace=0.2, include_descendants=False)
        assert report.terminated == report.killed == []
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_reap_forgets_children_that_exited(children: ChildProcesses) -> None:
    quick = children.spawn(["true"])
    slow = children.spawn(["sleep", "60"])
    quick.wait()
    assert children.reap() == [quick.pid]
    assert children.tracked() == [slow.pid]


def test_process_table_without_proc_matches_proc() -> None:
    # macOS builds the tree from `ps -A`; it must find the same descendants as /proc does.
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(parent.stdout.readline())
        by_ps = descendants(os.getpid(), _ps_process_table())
        by_proc = descendants(os.getpid(), _proc_process_table())
        assert {parent.pid, grandchild} <= set(by_ps)
        assert set(by_ps) == set(by_proc)
        assert by_ps.index(parent.pid) < by_ps.index(grandchild)  # parents first
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        subprocess.run(["kill", "-9", str(grandchild)], check=False)


ARENA_PROBE = """
import ctypes, os, sys, tempfile, threading
from processor.service.resources import limit_malloc_arenas
if sys.argv[1] == "capped":
    assert limit_malloc_arenas()
barrier = threading.Barrier(6)
held = []
def work():
    barrier.wait()  # all six allocate at once: each contends for an arena
    held.append([bytes(4096) for _ in range(2000)])
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
with tempfile.TemporaryFile() as f:
    stream = libc.fdopen(os.dup(f.fileno()), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    f.seek(0)
    print(f.read().decode().count("<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc arenas are glibc's")
def test_the_processor_caps_malloc_arenas() -> None:
    def arenas(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        return int(out.strip())

    assert arenas("capped") <= 2
    assert arenas("default") > 2  # the probe can tell: without the cap the threads get arenas of their own


TRIM_PROBE = """
import sys
from processor.service.resources import release_free_memory, rss_bytes
# 120 MB in malloc'd blocks (bytes over 512 B skip Python's small-object allocator), then all but one block in
# 64 freed: no heap top comes free, so glibc keeps the pages until asked.
blocks = [bytes(4000) for _ in range(30_000)]
kept = blocks[::64]
del blocks
before = rss_bytes()
if sys.argv[1] == "release":
    assert release_free_memory()
print(before, rss_bytes())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_freed_memory_goes_back_to_the_os_when_the_watchdog_releases_it() -> None:
    def rss(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", TRIM_PROBE, mode], capture_output=True, text=True, check=True,
                             timeout=60, env={**os.environ, "MALLOC_ARENA_MAX": "1"}).stdout
        before, after = map(int, out.split())
        return before, after

    kept_before, kept_after = rss("keep")
    released_before, released_after = rss("release")
    assert kept_before - kept_after < 20 * MB  # left alone, the freed pages stay resident
    assert released_before - released_after > 60 * MB  # released: back to the OS


def test_the_watchdog_releases_free_memory_before_each_sample() -> None:
    calls: list[str] = []
    watchdog = MemoryWatchdog(warn_mb=400, limit_mb=512, on_limit=print, release=lambda: calls.append("release"),
                              sample=lambda: calls.append("sample") or 100 * MB)
    assert watchdog.check() == "ok" and watchdog.check() == "ok"
    assert calls == ["release", "sample", "release", "sample"]


THRESHOLD_PROBE = """
import ctypes, sys
from processor.service.resources import fix_mmap_threshold
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
big = bytearray(8 * 2**20)  # mapped on its own; freeing it would raise glibc's threshold to 8 MB
del big
blocks = [bytearray(2**20) for _ in range(4)]  # 1 MB blocks after that
print(libc.mallinfo2().hblks)  # blocks mapped on their own
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the mmap threshold is glibc's")
def test_large_blocks_stay_out_of_the_heap_after_a_larger_one_was_freed() -> None:
    def mapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", THRESHOLD_PROBE, mode], capture_output=True, text=True,
                             check=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                          if k != "MALLOC_MMAP_THRESHOLD_"}).stdout
        return int(out)

    assert mapped("dynamic") < 4  # glibc moved its threshold: the 1 MB blocks came from the heap
    assert mapped("fixed") >= 4  # fixed: each is mapped, and unmapped when freed
