"""The MCP bridge Claude Code starts: the tools served by the running processor, and its fallbacks.

Done when: with `engram run` up, a real MCP client talking to `python -I -m mcp_tools.bridge` lists and
calls the tools, which the processor answers with its warm model, scoped to the project the bridge was
started in; the bridge never imports the SDK; when the processor stops mid-session the same session goes
on through a server of the bridge's own (one answer per request, the handshake not answered twice);
with no processor at all the bridge is the full server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from processor.config import Settings, load_settings
from processor.memory.episode_store import EpisodeStore
from processor.service.control_client import ping
from processor.store import open_store
from tests.conftest import query_live_db

REPO = Path(__file__).resolve().parents[2]
BRIDGE_ARGS = ["-I", "-m", "mcp_tools.bridge"]
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path, shared_models_dir: Path) -> tuple[Settings, Path, dict[str, str]]:
    """A home with two projects' memories, and a subfolder of one project's repository to start in."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    settings = load_settings(env={"ENGRAM_HOME": str(home), "ENGRAM_MODELS_DIR": str(shared_models_dir)})
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    store = EpisodeStore(settings, open_store(settings.db_path))
    ids = {}
    for key, text, project in (
        ("here", "The shop's checkout retries the payment webhook three times with backoff", str(repo)),
        ("there", "The blog's payment webhook is verified with an HMAC signature", "/elsewhere/blog"),
    ):
        ids[key], _ = store.remember(text, kind="fact", scope="project", project=project, session_id="s")
    store.conn.close()
    return settings, repo / "src", ids


def env_for(settings: Settings, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") or k == "ENGRAM_MODELS_DIR"}
    return {**env, "ENGRAM_HOME": str(settings.home), "ENGRAM_PROJECTS_DIR": str(tmp_path / "projects")}


@pytest.fixture
def processor(workspace, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    settings = workspace[0]
    (tmp_path / "projects").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO,
                            env=env_for(settings, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while ping(settings.run_dir, timeout=1) is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def test_the_bridge_imports_neither_the_sdk_nor_the_memory_layer() -> None:
    code = ("import sys, mcp_tools.bridge; "
            "print(sorted(m for m in ('mcp', 'pydantic', 'numpy', 'apsw', 'llama_cpp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


@pytest.mark.anyio
async def test_the_running_processor_serves_the_tools_through_the_bridge(workspace, processor, tmp_path) -> None:
    settings, start_dir, ids = workspace
    params = StdioServerParameters(command=sys.executable, args=BRIDGE_ARGS, cwd=str(start_dir),
                                   env=env_for(settings, tmp_path))
    async with Client(params, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        recalled = text_of(await client.call_tool("memory_recall", {"query": "payment webhook retries"}))
        everywhere = text_of(await client.call_tool("memory_recall", {"query": "payment webhook", "project": "*"}))
        status = text_of(await client.call_tool("memory_status", {}))
        remembered = text_of(await client.call_tool("memory_remember", {"text": "Checkout tests need Stripe's CLI"}))
    assert {"memory_recall", "memory_expand", "memory_remember", "memory_forget"} <= names
    # Scoped to the project the bridge was started in, though the processor serves every project.
    assert ids["here"] in recalled and ids["there"] not in recalled
    assert ids["here"] in everywhere and ids["there"] in everywhere
    assert status.startswith("The Engram processor is running")
    assert (ping(settings.run_dir) or {}).get("mcp_tools") == "ready"  # what `engram doctor` shows
    assert remembered.startswith("Queued; the Engram processor stores it")
    repo = str(start_dir.parent)
    deadline = time.monotonic() + 30
    while not query_live_db(settings.db_path, "SELECT project FROM episodes WHERE summary LIKE 'Checkout tests%'"):
        assert time.monotonic() < deadline, "the remembered memory was never stored"
        time.sleep(0.1)
    assert query_live_db(settings.db_path, "SELECT project FROM episodes WHERE summary LIKE 'Checkout tests%'") \
        == [(repo,)]


def _exchange(proc: subprocess.Popen[str], messages: list[dict], wanted: set[int], timeout: float = 60) -> list[dict]:
    """Send messages; read answers until every wanted id was answered."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    proc.stdin.flush()
    answers: list[dict] = []
    deadline = time.monotonic() + timeout
    while not wanted <= {a.get("id") for a in answers}:
        assert time.monotonic() < deadline, answers
        line = proc.stdout.readline()
        assert line, f"the bridge closed its output; answers so far: {answers}"
        answers.append(json.loads(line))
    return answers


def call(id_: int, tool: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def test_a_session_goes_on_when_the_processor_stops(workspace, processor, tmp_path) -> None:
    settings, start_dir, ids = workspace
    bridge = subprocess.Popen([sys.executable, *BRIDGE_ARGS], cwd=start_dir, env=env_for(settings, tmp_path),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = _exchange(bridge, [INITIALIZE, INITIALIZED, call(1, "memory_status", {})], {0, 1})
        processor.send_signal(signal.SIGTERM)
        processor.wait(timeout=30)
        after = _exchange(bridge, [call(2, "memory_status", {}),
                                   call(3, "memory_recall", {"query": "payment webhook retries"})], {2, 3}, timeout=120)
        assert bridge.stdin is not None
        bridge.stdin.close()
        rest = [json.loads(line) for line in bridge.stdout or [] if line.strip()]
        assert bridge.wait(timeout=30) == 0
    finally:
        if bridge.poll() is None:
            bridge.kill()
    answers = before + after + rest
    assert [a.get("id") for a in answers if "id" in a] == [0, 1, 2, 3]  # the replayed handshake is not answered
    by_id = {a["id"]: a for a in answers}
    assert by_id[1]["result"]["content"][0]["text"].startswith("The Engram processor is running")
    assert by_id[2]["result"]["content"][0]["text"].startswith("degraded: the Engram processor is not running")
    recalled = by_id[3]["result"]["content"][0]["text"]
    assert ids["here"] in recalled and ids["there"] not in recalled  # same project scope in its own server
    assert "serving this session here" in (bridge.stderr.read() if bridge.stderr else "")


def test_with_no_processor_the_bridge_is_the_full_server(workspace, tmp_path) -> None:
    settings, start_dir, ids = workspace
    bridge = subprocess.Popen([sys.executable, *BRIDGE_ARGS], cwd=start_dir, env=env_for(settings, tmp_path),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        answers = _exchange(bridge, [INITIALIZE, INITIALIZED, call(1, "memory_recall", {"query": "webhook retries"})],
                            {0, 1}, timeout=120)
    finally:
        bridge.kill()
        bridge.wait()
    recalled = {a["id"]: a for a in answers if "id" in a}[1]["result"]["content"][0]["text"]
    assert re.search(rf"ID: {ids['here']}", recalled) and ids["there"] not in recalled
