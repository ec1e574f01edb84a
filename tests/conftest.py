"""Shared fixtures: a private Engram home, a projects dir, and the real fixture transcripts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The shared-memory fixtures (a PostgreSQL started once per session, when a test asks for it).
pytest_plugins = ["tests.support.share_fixtures"]

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURE_PROJECTS = SHARED / "fixtures" / "claude-projects"


@pytest.fixture(scope="session", autouse=True)
def shared_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One converted embedding model for the whole run (subprocesses inherit it via the environment)."""
    models = tmp_path_factory.mktemp("models")
    os.environ["ENGRAM_MODELS_DIR"] = str(models)
    return models


@pytest.fixture(autouse=True)
def other_agents_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other agents' folders point into the test's own (empty) folder: a processor a test starts never
    captures the sessions of the machine's real agents."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "no-codex-home"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "no-gemini-home"))
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "no-copilot-home"))
    monkeypatch.setenv("QWEN_HOME", str(tmp_path / "no-qwen-home"))
    monkeypatch.delenv("QWEN_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "no-xdg-data"))  # opencode's opencode.db lives under it
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "no-pi-home"))


@pytest.fixture
def engram_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "engram-home"
    monkeypatch.setenv("ENGRAM_HOME", str(home))
    for name in list(os.environ):
        if name.startswith("ENGRAM_") and name not in ("ENGRAM_HOME", "ENGRAM_MODELS_DIR"):
            monkeypatch.delenv(name)
    return home


@pytest.fixture
def projects_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "projects"
    root.mkdir()
    monkeypatch.setenv("ENGRAM_PROJECTS_DIR", str(root))
    return root


@pytest.fixture
def fixture_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A writable copy of the real fixture transcripts, with fresh mtimes."""
    root = tmp_path / "fixture-projects"
    shutil.copytree(FIXTURE_PROJECTS, root)
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    monkeypatch.setenv("ENGRAM_PROJECTS_DIR", str(root))
    return root


def run_engram(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real `engram` CLI in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "processor.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"engram {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def query_live_db(db: Path, sql: str, *args: object) -> list[tuple]:
    """Read a running processor's database; [] while it is still being created.

    A reader racing the processor's migrations sees either "no such table" (SQLError) or,
    when the schema changes between prepare and step, SchemaChangeError; both mean "not yet".
    """
    import apsw
    if not db.exists():
        return []
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)
    try:
        return conn.execute(sql, args).fetchall()
    except (apsw.SQLError, apsw.SchemaChangeError):
        return []
    finally:
        conn.close()


@pytest.fixture
def holder(engram_home: Path):
    """The settings of a fresh ENGRAM_HOME, as the processor holds them."""
    from processor.config import SettingsHolder, load_settings

    return SettingsHolder(load_settings())


@pytest.fixture
def store(holder):
    """An EpisodeStore on that home's database (a module may define its own `store`)."""
    from processor.memory.episode_store import EpisodeStore
    from processor.store import open_store

    conn = open_store(holder.current.db_path)
    yield EpisodeStore(holder, conn)
    conn.close()

