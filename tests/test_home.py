"""A home of its own: the platform's data folder, an earlier Engram's ~/.engram used where it is, another
program's never, the database stamped with Engram's application_id, and a foreign database refused."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from processor.config import APPLICATION_ID, engram_home, home_origin, platform_data_home
from processor.doctor import check_database, check_home, run_checks
from processor.store import open_store
from processor.store.connection import FIRST_MIGRATION, NotEngramDatabase, connect, database_identity
from processor.store.migrations import MIGRATIONS, migrate
from tests.conftest import REPO, run_engram


def user(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "u"
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), **extra}


def other_programs_db(path: Path, application_id: int = 0) -> bytes:
    """A SQLite file like the other engram tool's ~/.engram/engram.db; returns its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE memories (id INTEGER PRIMARY KEY, content TEXT)")
    conn.execute("INSERT INTO memories (content) VALUES ('theirs')")
    if application_id:
        conn.execute(f"PRAGMA application_id = {application_id}")
    conn.commit()
    conn.close()
    return path.read_bytes()


def earlier_engram_db(path: Path) -> None:
    """An Engram database as written before m009 (no application_id)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER)")
    for migration in MIGRATIONS[:8]:
        migration(conn)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (migration.__name__,))
    conn.execute("INSERT INTO sessions (session_id, transcript_path, created_at, updated_at) VALUES ('s', 'p', 0, 0)")
    conn.close()


def hook_home(env: dict[str, str]) -> str:
    """hook_io.data_home() as the hooks compute it: -I -S, stdlib only, this environment."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import hook_io; print(hook_io.data_home())"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(REPO / "processor" / "hook_kit")],
                          env={"PATH": os.environ.get("PATH", ""), **env}, capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.strip()


# ------------------------------------------------------------------------------- where the home is


def test_the_default_is_the_platforms_data_folder(tmp_path: Path) -> None:
    env = user(tmp_path)
    home = Path(env["HOME"])
    assert platform_data_home(env, "linux") == home / ".local" / "share" / "engram"
    assert platform_data_home({**env, "XDG_DATA_HOME": str(tmp_path / "xdg")}, "linux") == tmp_path / "xdg" / "engram"
    # The XDG spec: a relative XDG_DATA_HOME is ignored.
    assert platform_data_home({**env, "XDG_DATA_HOME": "rel/dir"}, "linux") == home / ".local" / "share" / "engram"
    assert platform_data_home(env, "darwin") == home / "Library" / "Application Support" / "engram"
    assert home_origin({**env, "ENGRAM_HOME": str(tmp_path / "mine")}) == (tmp_path / "mine", "ENGRAM_HOME")
    assert home_origin(env) == (platform_data_home(env), "platform default")


def scenario(tmp_path: Path, name: str) -> dict[str, str]:
    env = user(tmp_path / name, XDG_DATA_HOME=str(tmp_path / name / "xdg"))
    legacy = Path(env["HOME"]) / ".engram"
    if name == "earlier-engram-stamped":
        conn = open_store(legacy / "engram.db")
        conn.close()
    elif name == "earlier-engram-before-the-id":
        earlier_engram_db(legacy / "engram.db")
        (legacy / "recollections").mkdir()
        (legacy / "queue").mkdir()
    elif name == "earlier-engram-no-db":
        (legacy / "recollections").mkdir(parents=True)
        (legacy / "queue").mkdir()
    elif name == "other-program":
        other_programs_db(legacy / "engram.db")
    elif name == "other-program-with-id":
        other_programs_db(legacy / "engram.db", application_id=0x12345678)
        (legacy / "recollections").mkdir()
        (legacy / "queue").mkdir()
    elif name == "not-sqlite":
        legacy.mkdir(parents=True)
        (legacy / "engram.db").write_text("a text file")
        (legacy / "recollections").mkdir()
        (legacy / "queue").mkdir()
    elif name == "both":
        conn = open_store(legacy / "engram.db")
        conn.close()
        (tmp_path / name / "xdg" / "engram").mkdir(parents=True)
    return env


@pytest.mark.parametrize("name, uses_legacy", [
    ("nothing", False),
    ("earlier-engram-stamped", True),
    ("earlier-engram-before-the-id", True),
    ("earlier-engram-no-db", True),
    ("other-program", False),
    ("other-program-with-id", False),
    ("not-sqlite", False),
    ("both", False),  # the platform's folder exists: it wins
])
def test_an_earlier_engrams_home_is_used_and_another_programs_never(
        tmp_path: Path, name: str, uses_legacy: bool) -> None:
    env = scenario(tmp_path, name)
    legacy = Path(env["HOME"]) / ".engram"
    expected = legacy if uses_legacy else tmp_path / name / "xdg" / "engram"
    before = {p: p.read_bytes() for p in legacy.rglob("*") if p.is_file()}
    assert engram_home(env, "linux") == expected
    # The hooks (stdlib, their own copy of the rule) agree with the processor in every case.
    if sys.platform != "darwin":
        assert hook_home(env) == str(expected)
    # Resolving never moves or changes anything.
    assert {p: p.read_bytes() for p in legacy.rglob("*") if p.is_file()} == before


def test_the_first_migration_is_the_one_a_database_is_known_by() -> None:
    assert MIGRATIONS[0].__name__ == FIRST_MIGRATION


# ------------------------------------------------------------------------------- the application id


def test_a_new_database_carries_engrams_application_id(tmp_path: Path) -> None:
    db = tmp_path / "h" / "engram.db"
    conn = open_store(db)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert database_identity(conn) == "engram"
    conn.close()
    assert int.from_bytes(db.read_bytes()[68:72], "big") == APPLICATION_ID


def test_an_earlier_engram_database_is_recognised_and_stamped(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    earlier_engram_db(db)
    reader = connect(db, readonly=True)  # read-only users (status, doctor) accept it as it is
    assert database_identity(reader) == "earlier-engram"
    reader.close()
    conn = open_store(db)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("SELECT session_id FROM sessions").fetchall() == [("s",)]  # nothing lost
    assert "m009_application_id" in [r[0] for r in conn.execute("SELECT name FROM schema_migrations")]
    assert migrate(conn) == []
    conn.close()


# A process that dies inside its first transaction, before Engram's migrations stamped the file: the
# transaction's pages are in the database and a hot journal is left beside it.
DIES_MID_TRANSACTION = """
import os, sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.pragma("journal_mode", "DELETE")
conn.pragma("cache_size", 1)
conn.execute("BEGIN; CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)")
conn.execute("CREATE TABLE half_made (x TEXT)")
for _ in range(300):
    conn.execute("INSERT INTO half_made VALUES (?)", ("x" * 2000,))
os._exit(9)
"""


def test_a_database_killed_while_it_was_first_created_is_rolled_back_and_opened(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    died = subprocess.run([sys.executable, "-c", DIES_MID_TRANSACTION, str(db)], check=False)
    assert died.returncode == 9 and db.stat().st_size > 0
    assert (tmp_path / "engram.db-journal").exists()
    conn = open_store(db)  # was: "not an Engram database (unreadable as SQLite: ReadOnlyError ...)"
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert "half_made" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()


@pytest.mark.parametrize("kind", ["tables-no-id", "other-id", "not-sqlite", "foreign-migrations"])
def test_a_foreign_database_is_refused_with_the_path_and_the_fix_and_left_untouched(
        tmp_path: Path, kind: str) -> None:
    db = tmp_path / "home" / "engram.db"
    if kind == "tables-no-id":
        other_programs_db(db)
    elif kind == "other-id":
        other_programs_db(db, application_id=0x7A7A7A7A)
    elif kind == "not-sqlite":
        db.parent.mkdir(parents=True)
        db.write_bytes(b"this is not a database at all, just text\n" * 200)
    else:
        other_programs_db(db)
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER)")
        conn.execute("INSERT INTO schema_migrations VALUES ('001_init', 0)")
        conn.commit()
        conn.close()
    before = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(NotEngramDatabase) as caught:
            if readonly:
                connect(db, readonly=True)
            else:
                open_store(db)
        message = str(caught.value)
        assert str(db) in message and "not an Engram database" in message and "ENGRAM_HOME" in message
    assert db.read_bytes() == before
    assert not Path(str(db) + "-wal").exists() or Path(str(db) + "-wal").stat().st_size == 0


def test_the_cli_and_doctor_refuse_a_foreign_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / "engram.db"
    before = other_programs_db(db)
    env = {"ENGRAM_HOME": str(home), "HOME": str(tmp_path)}
    for args in (["status"], ["run", "--once", "--projects-dir", str(tmp_path / "none")], ["recall", "x"]):
        done = run_engram(*args, env=env, check=False)
        assert done.returncode == 78, (args, done.stdout, done.stderr)
        assert f"{db} is not an Engram database" in done.stderr and "ENGRAM_HOME" in done.stderr
        assert "Traceback" not in done.stderr
    assert db.read_bytes() == before
    checks = {c.name: c for c in run_checks({**os.environ, **env})}
    assert not checks["database"].ok and checks["database"].severity == "error"
    assert "another program" in checks["database"].detail and "ENGRAM_HOME" in (checks["database"].fix or "")


def test_doctor_reports_the_application_id_and_the_home(tmp_path: Path) -> None:
    from processor.doctor import _load_probe

    env = user(tmp_path, XDG_DATA_HOME=str(tmp_path / "xdg"))
    home = tmp_path / "xdg" / "engram"
    open_store(home / "engram.db").close()
    probe = _load_probe(env)
    check = check_database(probe)
    assert check.ok and f"application_id {APPLICATION_ID:#x} (Engram's)" in check.detail
    probe.db.close()
    home_check = check_home(probe)
    assert home_check.ok and "platform's default" in home_check.detail
    # Another program's ~/.engram next to it is named, and left alone.
    other_programs_db(Path(env["HOME"]) / ".engram" / "engram.db")
    assert "belongs to another program" in check_home(_load_probe(env)).detail
    # An earlier Engram's database before the id: a warning that says it is stamped on the next run.
    legacy_env = user(tmp_path / "b", XDG_DATA_HOME=str(tmp_path / "b" / "xdg"))
    legacy = Path(legacy_env["HOME"]) / ".engram"
    earlier_engram_db(legacy / "engram.db")
    (legacy / "recollections").mkdir()
    (legacy / "queue").mkdir()
    probe = _load_probe(legacy_env)
    assert probe.settings.home == legacy
    check = check_database(probe)
    assert not check.ok and check.severity == "warning" and "stamps it" in (check.fix or "")
    assert "earlier Engram's home" in check_home(probe).detail
