"""What the capture tests of the Codex CLI and the Gemini CLI share: a real SQLite file, each agent's folder, one tailer
for both, and what a session left in the database."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from bench.testbed.agent_transcripts import Rollout
from processor.capture.codex import CodexFormat
from processor.capture.gemini import GeminiFormat
from processor.capture.tailer import Tailer
from processor.hook_kit.hook_io import fence
from processor.store import open_store

ENGRAM_DIGEST = fence("Engram memory digest: use uv, never pip (id: ep_0001)")


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    connection = open_store(tmp_path / "engram.db")
    yield connection
    connection.close()


@pytest.fixture
def codex_home(tmp_path: Path) -> Path:
    return tmp_path / "codex-home"


@pytest.fixture
def gemini_dir(tmp_path: Path) -> Path:
    return tmp_path / "gemini-home" / ".gemini"


@pytest.fixture
def tailer(conn: apsw.Connection, codex_home: Path, gemini_dir: Path, tmp_path: Path) -> Tailer:
    return Tailer(conn, formats=[CodexFormat(codex_home / "sessions", tmp_path / "engram-home" / "agent-work"),
                                 GeminiFormat(gemini_dir / "tmp", tmp_path / "engram-home" / "agent-work")])


def rows(conn: apsw.Connection, session_id: str) -> list[tuple[str, str]]:
    return [(role, text) for role, text in conn.execute(
        "SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_id,))]


def calls(conn: apsw.Connection, session_id: str) -> list[tuple[str, str | None, int, str | None]]:
    return [tuple(r) for r in conn.execute("SELECT tool, target, failed, error FROM tool_calls WHERE session_id = ? "
                                           "ORDER BY rowid", (session_id,))]


def all_text(conn: apsw.Connection) -> str:
    return "\n".join(text for (text,) in conn.execute("SELECT text FROM messages"))



def codex_session(codex_home: Path) -> Rollout:
    rollout = Rollout(codex_home, cwd="/tmp/shop-api")
    rollout.turn()
    rollout.environment()
    rollout.hook_context(ENGRAM_DIGEST)
    rollout.prompt("Why does the migration fail on CI?")
    rollout.hook_context("<hook_context>PROMPT-CONTEXT</hook_context>")
    rollout.exec_command("uv run alembic upgrade head", "sqlite3.OperationalError: no such column: orders.total",
                         exit_code=1)
    rollout.hook_context(fence("Before this call on uv run alembic: an earlier session left these about it"))
    rollout.exec_command("uv run alembic upgrade head --sql", "ALTER TABLE orders ADD COLUMN total")
    rollout.answer("The migration needs the orders.total column first; run the 0042 revision.")
    rollout.done()
    return rollout
