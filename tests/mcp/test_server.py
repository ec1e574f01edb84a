"""The MCP server: memory tools from a real MCP client, in-process and over stdio.

Done when: the tools work from a real client (list tools, recall, expand, remember); bad inputs give
clear tool errors, not crashes; reads survive a busy database; memory_status reports degraded mode;
the server never imports an agent SDK and writes nothing but the protocol to stdout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from mcp_tools.server import MAX_QUERY_CHARS, build_server
from processor.capture.project import project_root
from processor.capture.remember_inbox import SUFFIX
from processor.config import Settings, load_settings
from processor.memory.episode_store import EpisodeStore
from processor.memory.gguf_convert import ensure_default_gguf
from processor.service.control_server import ControlServer
from processor.service.pidfile import PidFile
from processor.store import episodes as sql
from processor.store import open_store

REPO = Path(__file__).resolve().parents[2]
# The server runs from the repo in these tests, so its default project is the repo's project: the main
# checkout's root even from a git worktree (worktrees of one repository are one project).
PROJECT = project_root(str(REPO)) or str(REPO)
OTHER_PROJECT = "/somewhere/else"
SEED_LINE = re.compile(r"^\[(\d+)\] \((\d{4}-\d{2}-\d{2}), (high|normal|low)\) (.+) — ID: (ep_[0-9a-f]+)$")

MEMORIES = {
    "sqlite": ("Engram keeps everything in one SQLite file in WAL mode, opened through apsw with one "
               "connection per thread", "decision", "global", None),
    "tabs": ("The user prefers tabs over spaces for indentation in Go files", "preference", "global", None),
    "websocket": ("Fixed the WebSocket race condition by adding a mutex around the connection map in server.ts",
                  "bugfix", "project", PROJECT),
    "deploy": ("Deploys go through the GitHub Actions release workflow; never push to production by hand",
               "convention", "global", None),
    "elsewhere": ("The billing service rounds invoice totals with banker's rounding", "fact", "project",
                  OTHER_PROJECT),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server hands DB work to its thread with asyncio.wrap_future


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real default GGUF, converted once for the whole module and shared by every Engram home."""
    path = tmp_path_factory.mktemp("models")
    ensure_default_gguf(path)
    return path


def make_home(root: Path, models_dir: Path, **overrides: Any) -> Settings:
    home = root / "engram-home"
    home.mkdir(parents=True, mode=0o700)
    (home / "models").symlink_to(models_dir, target_is_directory=True)
    # Only ENGRAM_HOME: no ENGRAM_* variable of the developer's shell leaks into the test.
    return load_settings(env={"ENGRAM_HOME": str(home)}, overrides=overrides)


@pytest.fixture(scope="module")
def memory_home(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> tuple[Settings, dict[str, str]]:
    """A home with a few real memories, written through the library; returns settings and their ids."""
    settings = make_home(tmp_path_factory.mktemp("memories"), models_dir)
    conn = open_store(settings.db_path)
    store = EpisodeStore(settings, conn)
    ids = {}
    for key, (text, kind, scope, project) in MEMORIES.items():
        ids[key], created = store.remember(text, kind=kind, scope=scope, project=project,
                                           session_id=f"session-{key}")
        assert created
    conn.close()
    return settings, ids


@pytest.fixture
def fresh_settings(tmp_path: Path, models_dir: Path) -> Settings:
    return make_home(tmp_path, models_dir)


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def episode_row(settings: Settings, episode_id: str) -> tuple[int, int, str]:
    conn = apsw.Connection(str(settings.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT access_count, accessed_at, status FROM episodes WHERE id = ?",
                           (episode_id,)).fetchone()
    finally:
        conn.close()
    assert row is not None
    return row


# --- the tools from an in-process client --------------------------------------------------------


@pytest.mark.anyio
async def test_lists_the_five_tools_with_hints_and_output_schemas(memory_home: tuple[Settings, dict]) -> None:
    settings, _ = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"memory_recall", "memory_expand", "memory_remember", "memory_forget", "memory_status",
                          "memory_review"}
    assert tools["memory_forget"].annotations.destructive_hint is True
    assert tools["memory_forget"].input_schema["required"] == ["id"]
    assert set(tools["memory_forget"].input_schema["properties"]) == {"id", "reason"}
    for name in ("memory_recall", "memory_expand", "memory_status", "memory_review"):
        assert tools[name].annotations.read_only_hint is True
    assert tools["memory_remember"].annotations.read_only_hint is False
    assert tools["memory_remember"].annotations.destructive_hint is False
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in tools.values())
    recall_args = tools["memory_recall"].input_schema
    assert recall_args["required"] == ["query"]
    assert set(recall_args["properties"]) == {"query", "limit", "project", "scope"}  # scope "team": shared memory
    assert set(tools["memory_remember"].input_schema["properties"]) == {"text", "kind", "scope"}
    assert tools["memory_expand"].input_schema["required"] == ["id"]


@pytest.mark.anyio
async def test_recall_finds_the_right_memory_first_as_dated_bites(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        websocket = await client.call_tool("memory_recall", {"query": "websocket race condition mutex"})
        sqlite = await client.call_tool("memory_recall", {"query": "which database and connection model?",
                                                          "limit": 2})
    assert not websocket.is_error
    lines = text_of(websocket).splitlines()
    parsed = [SEED_LINE.match(line) for line in lines]
    assert all(parsed), lines  # seed 001: [1] (2026-02-20, high) bite — ID: ep_…
    assert parsed[0].group(5) == ids["websocket"]
    assert [int(m.group(1)) for m in parsed] == list(range(1, len(lines) + 1))
    assert websocket.structured_content["hits"][0]["id"] == ids["websocket"]
    assert websocket.structured_content["project"] == PROJECT
    assert ids["elsewhere"] not in text_of(websocket)  # another project's memory stays out

    assert sqlite.structured_content["hits"][0]["id"] == ids["sqlite"]
    assert len(sqlite.structured_content["hits"]) <= 2
    assert sqlite.structured_content["hits"][0]["importance"] == "high"  # a decision


@pytest.mark.anyio
async def test_recall_project_argument(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        elsewhere = await client.call_tool("memory_recall", {"query": "invoice rounding", "project": OTHER_PROJECT})
        here = await client.call_tool("memory_recall", {"query": "invoice rounding"})
        everywhere = await client.call_tool("memory_recall", {"query": "websocket mutex", "project": "*"})
    assert elsewhere.structured_content["hits"][0]["id"] == ids["elsewhere"]
    assert ids["websocket"] not in text_of(elsewhere)
    assert ids["elsewhere"] not in text_of(here)
    assert everywhere.structured_content["project"] is None
    assert everywhere.structured_content["hits"][0]["id"] == ids["websocket"]


@pytest.mark.anyio
async def test_expand_gives_full_content_and_provenance(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        result = await client.call_tool("memory_expand", {"id": ids["websocket"]})
    assert not result.is_error
    data = result.structured_content
    assert data["full_content"] == MEMORIES["websocket"][0]
    assert data["session_id"] == "session-websocket"
    assert data["project"] == PROJECT
    assert data["kind"] == "bugfix" and data["scope"] == "project" and data["source_type"] == "manual"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["date"])
    assert isinstance(data["entities"], list) and isinstance(data["source_messages"], list)
    text = text_of(result)
    assert text.startswith(f"## Memory {ids['websocket']}")
    assert MEMORIES["websocket"][0] in text and "**Date:**" in text and PROJECT in text


@pytest.mark.anyio
async def test_only_expand_updates_access_statistics(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    count_before, _, _ = episode_row(settings, ids["deploy"])
    started_ms = int(time.time() * 1000)
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        recalled = await client.call_tool("memory_recall", {"query": "how do deploys to production work"})
        assert recalled.structured_content["hits"][0]["id"] == ids["deploy"]
        after_recall, _, _ = episode_row(settings, ids["deploy"])
        await client.call_tool("memory_expand", {"id": ids["deploy"]})
        after_expand, accessed_at, _ = episode_row(settings, ids["deploy"])
    assert after_recall == count_before  # being returned is not being used: no rich-get-richer
    assert after_expand == after_recall + 1
    assert accessed_at >= started_ms


# --- bad inputs: clear tool errors, never crashes ----------------------------------------------


@pytest.mark.anyio
async def test_empty_and_huge_queries_are_clear_errors(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        empty = await client.call_tool("memory_recall", {"query": ""})
        blank = await client.call_tool("memory_recall", {"query": "   \n\t "})
        huge = await client.call_tool("memory_recall", {"query": "websocket " + "w" * 102_390})  # 100 KB
        bad_limit = await client.call_tool("memory_recall", {"query": "websocket", "limit": 0})
        still_fine = await client.call_tool("memory_recall", {"query": "websocket mutex"})
    assert empty.is_error and "needs a query" in text_of(empty)
    assert blank.is_error and "needs a query" in text_of(blank)
    assert huge.is_error
    assert "102400 characters" in text_of(huge) and str(MAX_QUERY_CHARS) in text_of(huge)
    assert bad_limit.is_error and "limit" in text_of(bad_limit)
    assert not still_fine.is_error and still_fine.structured_content["hits"][0]["id"] == ids["websocket"]


@pytest.mark.anyio
async def test_unknown_and_forgotten_ids_are_clear_errors(memory_home: tuple[Settings, dict]) -> None:
    settings, _ = memory_home
    conn = open_store(settings.db_path)
    store = EpisodeStore(settings, conn)
    doomed, _ = store.remember("Temporary: the staging box is called pluto-7", kind="fact", scope="global")
    store.forget(doomed)
    conn.close()
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        unknown = await client.call_tool("memory_expand", {"id": "ep_0000000000000000"})
        empty = await client.call_tool("memory_expand", {"id": " "})
        forgotten = await client.call_tool("memory_expand", {"id": doomed})
        recalled = await client.call_tool("memory_recall", {"query": "staging box pluto-7"})
    assert unknown.is_error
    assert "ep_0000000000000000" in text_of(unknown) and "memory_recall" in text_of(unknown)
    assert empty.is_error and "needs an id" in text_of(empty)
    assert forgotten.is_error and "forgotten" in text_of(forgotten) and doomed in text_of(forgotten)
    assert "pluto" not in text_of(forgotten)  # its content is gone, not leaked through the error
    assert doomed not in text_of(recalled)


@pytest.mark.anyio
async def test_missing_model_file_names_the_path_and_the_fix(tmp_path: Path, models_dir: Path) -> None:
    missing = tmp_path / "nowhere" / "embed.gguf"
    settings = make_home(tmp_path, models_dir, embedding_model=str(missing))
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        result = await client.call_tool("memory_recall", {"query": "anything"})
        status = await client.call_tool("memory_status", {})
    assert result.is_error
    message = text_of(result)
    assert str(missing) in message and "GGUF" in message and "'default'" in message
    assert not status.is_error  # status still answers from the database


@pytest.mark.anyio
async def test_corrupt_model_file_names_the_path_and_the_fix(tmp_path: Path, models_dir: Path) -> None:
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + os.urandom(64))
    settings = make_home(tmp_path, models_dir, embedding_model=str(corrupt))
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        first = await client.call_tool("memory_recall", {"query": "anything"})
        second = await client.call_tool("memory_recall", {"query": "anything"})  # the server survived
    for result in (first, second):
        assert result.is_error
        assert str(corrupt) in text_of(result) and "corrupt or not a GGUF file" in text_of(result)
        assert "replace it" in text_of(result)


@pytest.mark.anyio
async def test_vectors_from_another_model_say_run_reindex(fresh_settings: Settings) -> None:
    conn = open_store(fresh_settings.db_path)
    sql.set_meta(conn, "embedding_model", "nomic-embed-text-v1.5.f16.gguf")
    sql.set_meta(conn, "embedding_dim", "768")
    conn.close()
    async with Client(build_server(fresh_settings, cwd=PROJECT)) as client:
        result = await client.call_tool("memory_recall", {"query": "anything at all"})
    assert result.is_error
    assert "engram reindex" in text_of(result) and "768" in text_of(result)


@pytest.mark.anyio
async def test_a_damaged_database_is_a_clear_error_and_status_still_answers(fresh_settings: Settings) -> None:
    fresh_settings.db_path.write_bytes(b"this is not a database\n" * 512)
    async with Client(build_server(fresh_settings, cwd=PROJECT)) as client:
        recalled = await client.call_tool("memory_recall", {"query": "anything"})
        status = await client.call_tool("memory_status", {})
    assert recalled.is_error and str(fresh_settings.db_path) in text_of(recalled)
    assert "move it aside" in text_of(recalled)
    assert not status.is_error
    assert str(fresh_settings.db_path) in status.structured_content["database_error"]
    assert status.structured_content["episodes"] is None


@pytest.mark.anyio
async def test_a_busy_database_does_not_fail_reads(memory_home: tuple[Settings, dict]) -> None:
    """The processor (another process) holds the write lock for over a second mid-recall."""
    settings, ids = memory_home
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time, apsw
            conn = apsw.Connection(sys.argv[1])
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO meta(key, value) VALUES ('busy-test', 'x') "
                         "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
            print("locked", flush=True)
            time.sleep(1.5)
            conn.execute("COMMIT")
        """), str(settings.db_path)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        async with Client(build_server(settings, cwd=PROJECT)) as client:
            recalled = await client.call_tool("memory_recall", {"query": "websocket race condition"})
            expanded = await client.call_tool("memory_expand", {"id": ids["websocket"]})
            status = await client.call_tool("memory_status", {})
    finally:
        assert writer.wait(timeout=30) == 0
    assert not recalled.is_error, text_of(recalled)
    assert recalled.structured_content["hits"][0]["id"] == ids["websocket"]
    assert not expanded.is_error, text_of(expanded)
    assert status.structured_content["database_error"] is None


@pytest.mark.anyio
async def test_remember_writes_one_queue_file_and_returns_at_once(fresh_settings: Settings) -> None:
    async with Client(build_server(fresh_settings, cwd=PROJECT)) as client:
        await client.list_tools()
        started = time.monotonic()
        result = await client.call_tool("memory_remember", {"text": "  Always run ruff before committing.  ",
                                                            "kind": "convention"})
        elapsed = time.monotonic() - started
        bad_kind = await client.call_tool("memory_remember", {"text": "x", "kind": "opinion"})
        empty = await client.call_tool("memory_remember", {"text": "   "})
        too_long = await client.call_tool("memory_remember", {"text": "y" * 20_001})
    assert not result.is_error, text_of(result)
    assert elapsed < 1.0  # no model, no database: one small file
    files = list(fresh_settings.queue_dir.iterdir())
    assert [f.name.endswith(SUFFIX) for f in files] == [True]
    payload = json.loads(files[0].read_text(encoding="utf-8"))
    assert payload["text"] == "Always run ruff before committing."
    assert payload["kind"] == "convention" and payload["project"] == PROJECT
    data = result.structured_content
    assert data["queued"] is True and data["file"] == str(files[0]) and data["scope"] == "project"
    assert data["processor_running"] is False and "engram run" in text_of(result)
    assert not fresh_settings.db_path.exists()  # remember never touches the database
    assert bad_kind.is_error and "unknown kind 'opinion'" in text_of(bad_kind)
    assert empty.is_error and "empty" in text_of(empty)
    assert too_long.is_error and "at most 20000 characters" in text_of(too_long)
    assert len(list(fresh_settings.queue_dir.iterdir())) == 1  # failed calls wrote nothing


@pytest.mark.anyio
async def test_global_remember_has_no_project(fresh_settings: Settings) -> None:
    async with Client(build_server(fresh_settings, cwd=PROJECT)) as client:
        result = await client.call_tool("memory_remember", {"text": "I like short commit messages",
                                                            "kind": "preference", "scope": "global"})
    [file] = fresh_settings.queue_dir.iterdir()
    payload = json.loads(file.read_text(encoding="utf-8"))
    assert payload["scope"] == "global" and payload["project"] is None
    assert result.structured_content["project"] is None


# --- memory_status: degraded and normal mode ------------------------------------------------------


@pytest.mark.anyio
async def test_status_reports_degraded_mode_without_a_processor(memory_home: tuple[Settings, dict]) -> None:
    settings, ids = memory_home
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        status = await client.call_tool("memory_status", {})
        recalled = await client.call_tool("memory_recall", {"query": "tabs or spaces for Go"})
    assert not status.is_error
    data = status.structured_content
    assert data["processor_running"] is False and data["mode"] == "degraded"
    assert "answering from the database only" in data["message"] and "engram run" in data["message"]
    assert data["episodes"] >= len(MEMORIES)
    assert data["episodes_by_status"]["active"] >= len(MEMORIES)
    assert data["embedding_model"] == "all-MiniLM-L6-v2" and data["embedding_dim"] == 384
    assert data["db_path"] == str(settings.db_path)
    assert data["pending_remember_files"] == 0
    assert text_of(status).startswith("degraded:")
    # ...and the tools still answer from the database.
    assert recalled.structured_content["hits"][0]["id"] == ids["tabs"]


@pytest.fixture
def running_processor(fresh_settings: Settings) -> Iterator[Settings]:
    """What `engram run` publishes: the instance lock and the control plane's port."""
    with PidFile(fresh_settings.run_dir), ControlServer(fresh_settings.run_dir, port=0,
                                                       ping=lambda: {"pid": os.getpid()}):
        yield fresh_settings


@pytest.mark.anyio
async def test_status_with_the_processor_running_and_pending_requests(running_processor: Settings) -> None:
    settings = running_processor
    async with Client(build_server(settings, cwd=PROJECT)) as client:
        remembered = await client.call_tool("memory_remember", {"text": "The CI runs on Python 3.11"})
        status = await client.call_tool("memory_status", {})
    assert remembered.structured_content["processor_running"] is True
    data = status.structured_content
    assert data["processor_running"] is True and data["mode"] == "normal"
    assert data["processor"]["pid"] == os.getpid()
    assert data["pending_remember_files"] == 1
    assert data["episodes"] == 0 and data["embedding_model"] is None


# --- the process: imports and stdio ---------------------------------------------------------------


def test_the_server_never_imports_an_agent_sdk_or_llm_client() -> None:
    code = ("import mcp_tools.server, sys; "
            "print([m for m in sys.modules if 'claude_agent_sdk' in m or 'openai' in m or 'anthropic' in m])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# The command `engram install` registers with Claude Code: isolated mode, so neither PYTHONPATH nor
# the project directory Claude Code starts it in can shadow Engram's modules.
SERVER_ARGS = ["-I", "-m", "mcp_tools.server"]


def server_env(settings: Settings) -> dict[str, str]:
    return {"ENGRAM_HOME": str(settings.home)}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])  # legacy: the initialize handshake Claude Code uses
async def test_stdio_round_trip_with_a_real_client(memory_home: tuple[Settings, dict], mode: str) -> None:
    settings, ids = memory_home
    params = StdioServerParameters(command=sys.executable, args=SERVER_ARGS, cwd=REPO,
                                   env=server_env(settings))
    async with Client(params, mode=mode, read_timeout_seconds=120) as client:
        tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        recalled = await client.call_tool("memory_recall", {"query": "websocket race condition"})
        # What Claude Code starts gives the model the compact text only: no schema, no structured copy.
        assert all(t.output_schema is None for t in tools) and recalled.structured_content is None
        first_id = re.findall(r"— ID: (\S+)", text_of(recalled))[0]
        expanded = await client.call_tool("memory_expand", {"id": first_id})
        remembered = await client.call_tool("memory_remember", {"text": f"stdio round trip works ({mode})"})
        unknown = await client.call_tool("memory_expand", {"id": "ep_ffffffffffffffff"})
    assert names == {"memory_recall", "memory_expand", "memory_remember", "memory_forget", "memory_status",
                     "memory_review"}
    assert first_id == ids["websocket"]
    assert SEED_LINE.match(text_of(recalled).splitlines()[0])
    assert MEMORIES["websocket"][0] in text_of(expanded) and expanded.structured_content is None
    queued = Path(re.findall(r"Queued as (\S+), but", text_of(remembered))[0])
    try:
        assert json.loads(queued.read_text(encoding="utf-8"))["text"] == f"stdio round trip works ({mode})"
    finally:
        queued.unlink()
    assert unknown.is_error and "ep_ffffffffffffffff" in text_of(unknown)


def test_stdout_carries_only_the_protocol(memory_home: tuple[Settings, dict], tmp_path: Path) -> None:
    """Raw pipes: every stdout line is JSON-RPC, even while llama.cpp loads the model and embeds.

    The server starts in a subfolder of another repository, as Claude Code would start it there:
    that repository's root becomes the default project.
    """
    settings, ids = memory_home
    repo = tmp_path / "other-repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    proc = subprocess.Popen([sys.executable, *SERVER_ARGS], cwd=repo / "src",
                            env={**os.environ, **server_env(settings)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "memory_recall", "arguments": {"query": "tabs or spaces in Go?"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "memory_status", "arguments": {}}},
    ]
    # stdin stays open until every answer is in: EOF would end the session before the replies.
    killer = threading.Timer(120, proc.kill)
    killer.start()
    lines: list[str] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        answered: set[int] = set()
        while answered != {1, 2, 3}:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            message = json.loads(line)  # a stray print would fail here
            if "id" in message:
                answered.add(message["id"])
        proc.stdin.close()
        lines += proc.stdout.readlines()  # whatever the server writes while shutting down
        proc.wait(timeout=30)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read() if proc.stderr else ""
    parsed = [json.loads(line) for line in lines if line.strip()]
    assert all(m.get("jsonrpc") == "2.0" for m in parsed), lines
    by_id = {m["id"]: m for m in parsed if "id" in m}
    assert set(by_id) == {1, 2, 3}, (lines, stderr)
    recalled = by_id[2]["result"]
    assert "structuredContent" not in recalled
    assert re.findall(r"— ID: (\S+)", recalled["content"][0]["text"])[0] == ids["tabs"]
    assert ids["websocket"] not in json.dumps(recalled)  # the other project's memory stays out
    assert by_id[3]["result"]["content"][0]["text"].startswith("degraded:")


def test_claude_codes_server_starts_without_the_memory_layer() -> None:
    """numpy, the embedder and the redaction rules cost about as much as the SDK's import: the server
    Claude Code starts (no output schemas) loads them on the first tool call, after `initialize`."""
    code = ("import sys; from mcp_tools.server import build_server; build_server(cwd='.', structured=False); "
            "print(sorted(m for m in ('numpy', 'processor.memory.episode_store', 'processor.redaction.rules', "
            "'processor.recall.forget') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "[]", out


@pytest.mark.anyio
async def test_claude_codes_server_recalls_through_the_processor_as_text(fresh_settings: Settings) -> None:
    """Without output schemas the processor's bites become text directly: no Hit objects, no memory layer."""
    bite = {"id": "ep_0123456789abcdef", "bite": "MEMORY.md § Build: Use pnpm, never npm", "date": "2026-11-20",
            "importance": "high", "kind": "convention", "score": 0.9, "source": "episode", "project": PROJECT,
            "relevance": 0.8, "note": None, "source_uuids": []}
    asked: list[dict] = []
    routes = {("POST", "/recall"): lambda body: asked.append(body) or {"bites": [bite]}}
    with PidFile(fresh_settings.run_dir), ControlServer(fresh_settings.run_dir, port=0, routes=routes,
                                                       ping=lambda: {"pid": os.getpid()}):
        async with Client(build_server(fresh_settings, cwd=PROJECT, structured=False)) as client:
            recalled = await client.call_tool("memory_recall", {"query": "package manager"})
    assert asked and asked[0]["query"] == "package manager"
    assert text_of(recalled) == ("[1] (2026-11-20, high) MEMORY.md § Build: Use pnpm, never npm "
                                 "— ID: ep_0123456789abcdef")
    assert recalled.structured_content is None
