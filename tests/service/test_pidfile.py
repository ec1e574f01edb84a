"""Single instance: one processor per ENGRAM_HOME, stale pid files replaced, recycled pids never trusted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.service.pidfile import (
    AlreadyRunning,
    PidFile,
    PidFileError,
    PidRecord,
    _ps_start_token,
    is_running,
    process_start_token,
    read_record,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _write(run_dir: Path, text: str) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "engram.pid"
    path.write_text(text)
    return path


def test_acquire_records_pid_and_start_time_in_a_private_file(run_dir: Path) -> None:
    lock = PidFile(run_dir)
    record = lock.acquire()
    try:
        assert record == PidRecord(os.getpid(), process_start_token(os.getpid()))
        assert read_record(run_dir) == record
        assert (run_dir / "engram.pid").read_text().splitlines()[0] == str(os.getpid())
        assert (run_dir / "engram.pid").stat().st_mode & 0o777 == 0o600
        assert run_dir.stat().st_mode & 0o777 == 0o700
        assert is_running(run_dir)
        assert record.is_live()
    finally:
        lock.release()
    assert not (run_dir / "engram.pid").exists()
    assert not is_running(run_dir)


def test_stale_file_of_a_dead_process_is_replaced(run_dir: Path) -> None:
    _write(run_dir, f"{_dead_pid()}\nlinux:whatever:123\n")
    assert not is_running(run_dir)
    assert read_record(run_dir) is not None and not read_record(run_dir).is_live()
    with PidFile(run_dir):
        assert read_record(run_dir).pid == os.getpid()


def test_pid_reused_by_an_unrelated_process_is_stale(run_dir: Path, sleeper: subprocess.Popen[bytes]) -> None:
    # The recorded pid is alive (a `sleep`), but started at another time than the recorded one.
    _write(run_dir, f"{sleeper.pid}\n{process_start_token(sleeper.pid)}-then\n")
    record = read_record(run_dir)
    assert record is not None and record.pid == sleeper.pid
    assert not record.is_live()
    assert not is_running(run_dir)
    with PidFile(run_dir):
        assert read_record(run_dir).pid == os.getpid()
    assert sleeper.poll() is None  # never touched


def test_a_record_without_start_time_is_never_trusted(run_dir: Path, sleeper: subprocess.Popen[bytes]) -> None:
    _write(run_dir, f"{sleeper.pid}\n")
    assert not read_record(run_dir).is_live()
    with PidFile(run_dir):
        pass


def test_garbage_pid_file_is_replaced(run_dir: Path) -> None:
    _write(run_dir, "not a pid\n")
    assert read_record(run_dir) is None
    with PidFile(run_dir):
        assert read_record(run_dir).pid == os.getpid()


def test_live_recorded_owner_without_lock_is_refused(run_dir: Path, sleeper: subprocess.Popen[bytes]) -> None:
    # Same pid *and* same start time: that process wrote the file and is still running. Refuse.
    _write(run_dir, f"{sleeper.pid}\n{process_start_token(sleeper.pid)}\n")
    with pytest.raises(AlreadyRunning) as info:
        PidFile(run_dir).acquire()
    assert info.value.pid == sleeper.pid
    assert read_record(run_dir).pid == sleeper.pid  # left alone


def test_second_instance_in_another_process_is_refused(run_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from processor.service.pidfile import PidFile
            PidFile(Path({str(run_dir)!r})).acquire()
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert is_running(run_dir)
        with pytest.raises(AlreadyRunning) as info:
            PidFile(run_dir).acquire()
        assert info.value.pid == holder.pid
        assert str(holder.pid) in str(info.value)
        assert read_record(run_dir).is_live()
        # However the holder dies, the kernel drops its lock: the next start takes over.
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert not is_running(run_dir)
        with PidFile(run_dir):
            assert read_record(run_dir).pid == os.getpid()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_second_acquire_in_the_same_process_is_refused(run_dir: Path) -> None:
    with PidFile(run_dir):
        with pytest.raises(AlreadyRunning) as info:
            PidFile(run_dir).acquire()
        assert info.value.pid == os.getpid()


def test_release_only_removes_our_own_file(run_dir: Path) -> None:
    lock = PidFile(run_dir)
    lock.acquire()
    # Someone replaced the file meanwhile (e.g. removed it by hand and a new instance started).
    (run_dir / "engram.pid").unlink()
    _write(run_dir, "4242\nsomeone-else\n")
    lock.release()
    assert (run_dir / "engram.pid").read_text() == "4242\nsomeone-else\n"
    lock.release()  # idempotent


def test_loose_mode_is_tightened(run_dir: Path) -> None:
    path = _write(run_dir, "")
    path.chmod(0o644)
    with PidFile(run_dir):
        assert path.stat().st_mode & 0o777 == 0o600


def test_symlinked_pid_file_is_refused(run_dir: Path, tmp_path: Path) -> None:
    run_dir.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    (run_dir / "engram.pid").symlink_to(target)
    with pytest.raises(PidFileError):
        PidFile(run_dir).acquire()
    assert not is_running(run_dir)


def test_start_tokens_tell_processes_apart(sleeper: subprocess.Popen[bytes]) -> None:
    mine, theirs = process_start_token(os.getpid()), process_start_token(sleeper.pid)
    assert mine and theirs and mine != theirs
    assert process_start_token(os.getpid()) == mine  # stable
    assert process_start_token(_dead_pid()) is None


def test_ps_fallback_used_without_proc(sleeper: subprocess.Popen[bytes]) -> None:
    # macOS has no /proc: the `ps -o lstart=` path must work on its own.
    token = _ps_start_token(sleeper.pid)
    assert token is not None and token.startswith("lstart:")
    assert _ps_start_token(sleeper.pid) == token
    assert _ps_start_token(_dead_pid()) is None
