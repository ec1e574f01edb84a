"""Fixtures for shared memory: one PostgreSQL for the test session, a fresh database per test, Engram homes as machines.

A test gets a `SharedSetup`: a database owned by a non-superuser role (who runs `engram share init`), and
people (database roles) made with exactly the grants `engram share init` prints. Each machine is an
Engram home of its own whose config.toml names the database; passwords live in a pgpass file (never in the
URL), as docs/shared-memory.md tells users.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bench.testbed.pg_cluster import PostgresCluster

if TYPE_CHECKING:
    from processor.memory.episode_store import EpisodeStore

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster():
    """The test session's PostgreSQL (started once, about a second), with a template database holding pgvector."""
    cluster = PostgresCluster()
    cluster.sql("CREATE DATABASE engram_template")
    # As a managed provider does: the extension is there before the database owner runs `engram share init`.
    cluster.sql("CREATE EXTENSION vector", database="engram_template")
    yield cluster
    cluster.remove()


@dataclass
class Machine:
    """One Engram home acting as one machine."""

    name: str
    home: Path
    role: str
    url: str
    projects: Path

    @property
    def settings(self):
        from processor.config import load_settings

        return load_settings(env={**os.environ, "ENGRAM_HOME": str(self.home)})

    def env(self) -> dict[str, str]:
        return {"ENGRAM_HOME": str(self.home)}


@dataclass
class SharedSetup:
    cluster: PostgresCluster
    database: str
    owner: str
    tmp: Path
    passfile: Path
    people: dict[str, str] = field(default_factory=dict)  # role → password

    def password(self, role: str) -> str:
        return self.people[role]

    def _remember_password(self, role: str, password: str) -> None:
        self.people[role] = password
        with open(self.passfile, "a") as f:
            f.write(f"127.0.0.1:{self.cluster.port}:*:{role}:{password}\n")

    def person(self, name: str, *, granted: bool = True) -> str:
        """A new database role (unique in the cluster), with the grants `engram share init` prints."""
        role = f"{name}_{next(_counter)}"
        password = f"pw-{role}"
        self.cluster.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        self._remember_password(role, password)
        if granted:
            self.grant(role)
        return role

    def grant(self, role: str) -> None:
        """Run the grants `engram share init` prints for a person, as the database owner (no superuser)."""
        from processor.share.postgres.migrations import grants

        text = grants(self.database, role)
        statements = [line for line in text.splitlines() if line and not line.startswith("--")
                      and not line.startswith(("CREATE ROLE", "INSERT INTO engram.team"))]
        self.cluster.sql("\n".join(statements), database=self.database, role=self.owner,
                         password=self.password(self.owner))

    def team(self, team: str, *members: str) -> None:
        """Make a team and its members, as the database owner does (the printed statements)."""
        from processor.share.postgres.migrations import grants

        for member in members:
            lines = [line for line in grants(self.database, member, team).splitlines()
                     if line.startswith("INSERT INTO engram.team")]
            self.cluster.sql("\n".join(lines), database=self.database, role=self.owner,
                             password=self.password(self.owner))

    def url(self, role: str, **params: str) -> str:
        return self.cluster.url(role, self.database, **params)

    def machine(self, name: str, role: str, *, projects: Path | None = None, extra: str = "",
                **params: str) -> Machine:
        """An Engram home whose config.toml names the database as `role` (and a transcripts root)."""
        home = self.tmp / f"home-{name}"
        home.mkdir(parents=True, exist_ok=True)
        url = self.url(role, **params)
        projects = projects or self.tmp / f"projects-{name}"
        projects.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(f'shared_database_url = "{url}"\nshare_interval_seconds = 0.2\n'
                                          f'projects_dir = "{projects}"\nrecent_days = 36500.0\n{extra}')
        return Machine(name, home, role, url, projects)

    def init(self, machine: Machine | None = None) -> None:
        """`engram share init` as the database owner (from a home of its own)."""
        from processor.share import commands

        admin = machine or self.machine("owner", self.owner)
        commands.init(admin.settings)

    def admin_sql(self, statements: str):
        """Run statements as the superuser in this database; returns the rows of the last one."""
        with self.cluster.connect(self.database) as conn:
            cur = conn.execute(statements)
            return cur.fetchall() if cur.description else []


@pytest.fixture
def shared(pg_cluster: PostgresCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SharedSetup:
    """A fresh database (from the pgvector template) owned by a fresh non-superuser role."""
    number = next(_counter)
    database, owner = f"engram_{number}", f"owner_{number}"
    passfile = tmp_path / "pgpass"
    passfile.write_text("")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    for name in list(os.environ):
        if name.startswith("ENGRAM_") and name != "ENGRAM_MODELS_DIR":
            monkeypatch.delenv(name)
    setup = SharedSetup(pg_cluster, database, owner, tmp_path, passfile)
    pg_cluster.sql(f"CREATE ROLE {owner} LOGIN PASSWORD 'pw-{owner}'")
    setup._remember_password(owner, f"pw-{owner}")
    pg_cluster.sql(f"CREATE DATABASE {database} OWNER {owner} TEMPLATE engram_template")
    pg_cluster.sql(f"ALTER SCHEMA public OWNER TO {owner}", database=database)
    return setup


def write_session(machine: Machine, session_id: str, rounds: list[tuple[str, str]], *, cwd: str,
                  folder: str = "-work-app") -> Path:
    """A transcript of user/assistant rounds in the machine's transcripts root (Claude Code's format)."""
    from bench.testbed.transcripts import assistant_line, user_line

    path = machine.projects / folder / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for index, (question, answer) in enumerate(rounds):
        minute = f"{index:02d}"
        lines.append(user_line(question, session_id=session_id, cwd=cwd, uid=f"{session_id}-u{index}",
                               timestamp=f"2026-11-01T10:{minute}:00.000Z"))
        lines.append(assistant_line(answer, session_id=session_id, cwd=cwd, message_id=f"{session_id}-m{index}",
                                    uid=f"{session_id}-a{index}", timestamp=f"2026-11-01T10:{minute}:05.000Z"))
    with open(path, "a") as f:
        f.writelines(lines)
    return path


def git_clone(path: Path, remote: str | None) -> str:
    """A git repository at path (a clone, as far as Engram can tell), with `remote` as its origin; its root."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if remote:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
    return str(path)


def capture(machine: Machine) -> int:
    """`engram backfill` on the machine: capture its transcripts and build their episodes; returns episodes."""
    from processor.config import ensure_home
    from processor.service.run_loop import Processor

    settings = machine.settings
    ensure_home(settings)
    return Processor(settings).run_once(None)[1]


def seed_memories(machine: Machine, count: int, *, prefix: str = "memory", project: str = "/work/app",
                  kind: str = "fact", seed: int = 0) -> list[str]:
    """Memories written straight through the store (real SQLite, real triggers) with unit vectors of the default
    model's size: the fault tests need many rows, not the embedding model."""
    import numpy as np

    from processor.memory.gguf_convert import MODEL_NAME
    from processor.memory.identity import content_hash
    from processor.store import episodes as episodes_sql
    from processor.store import open_store, write_transaction
    from processor.store.episodes import NewEpisode

    rng = np.random.default_rng(seed)
    conn = open_store(machine.settings.db_path)
    ids = []
    try:
        with write_transaction(conn):
            if episodes_sql.get_meta(conn, "embedding_model") is None:
                episodes_sql.set_meta(conn, "embedding_model", MODEL_NAME)
                episodes_sql.set_meta(conn, "embedding_dim", "384")
            for n in range(count):
                vector = rng.standard_normal(384).astype(np.float32)
                vector /= np.linalg.norm(vector)
                text = f"{prefix} {n}: the {n}th fact about the build, seed {seed}"
                memory_id = f"ep_{prefix}{seed}x{n:06d}"
                episodes_sql.insert_episode(conn, NewEpisode(
                    id=memory_id, session_id=None, project=project, scope="project", summary=text, entities=[],
                    importance="normal", kind=kind, source_type="auto", full_content=text, source_uuids=[],
                    content_hash=content_hash(text), created_at=1_700_000_000_000 + n), vector.tobytes())
                ids.append(memory_id)
    finally:
        conn.close()
    return ids


def set_model_meta(machine: Machine) -> None:
    """Record the default model as the one the (empty) store's vectors come from, without loading it."""
    seed_memories(machine, 0)


def store_of(machine: Machine) -> EpisodeStore:
    """The machine's episode store (its own connection)."""
    from processor.memory.episode_store import EpisodeStore
    from processor.store import open_store

    return EpisodeStore(machine.settings, open_store(machine.settings.db_path))


def sync(machine: Machine) -> None:
    """One `engram share push` + `pull` pass of the machine, its connections closed after."""
    from processor.share.sync import Sharing

    sharing = Sharing(machine.settings)
    try:
        sharing.sync()
    finally:
        sharing.close_all()


@dataclass
class StalledPull:
    """A machine's pull running in a thread, its batches fetched but waiting for the store's write lock, which
    the test holds (``blocker``) until it has done what it wanted in between (killed the server, say)."""

    sharing: Any
    blocker: Any
    thread: threading.Thread
    failure: list[BaseException]

    def release(self, timeout: float = 60.0) -> None:
        """Let the pull apply what it fetched and finish (or fail); its connections closed after."""
        self.blocker.execute("ROLLBACK")
        self.blocker.close()
        self.thread.join(timeout=timeout)
        self.sharing.close_all()


def stalled_pull(machine: Machine) -> StalledPull:
    """The machine's pull started in a thread while the test holds its store's write lock (see ``StalledPull``);
    what the pull raises is kept in ``failure``."""
    import apsw

    from processor.share.sync import Sharing

    sharing = Sharing(machine.settings)
    sharing.open()
    blocker = apsw.Connection(str(machine.settings.db_path))
    blocker.execute("BEGIN IMMEDIATE")
    failure: list[BaseException] = []

    def pull() -> None:
        try:
            sharing.pull()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            failure.append(exc)

    thread = threading.Thread(target=pull)
    thread.start()
    return StalledPull(sharing, blocker, thread, failure)
