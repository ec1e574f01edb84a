"""Fakes of Claude Code for the claude backend tests: an in-process SDK transport and a fake `claude` CLI.

``FakeClaudeTransport`` plugs into ``claude_agent_sdk.query(transport=...)``: it answers the
control protocol's initialize request and the prompt as the CLI would, per ``mode``:
ok | error (an API error result) | structured_retries (the CLI gave up on the schema) |
hang (never answers) | crash (the process dies). It records what the SDK wrote to it.

``write_fake_cli(dir)`` makes an executable ``claude`` that speaks the same stream-json over
stdin/stdout through the SDK's real subprocess transport, records its argv, cwd and environment,
and writes its session transcript under ``$CLAUDE_CONFIG_DIR/projects/<encoded cwd>/`` exactly
where the real CLI does, so tests can check the tailer never sees it.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from claude_agent_sdk import Transport
from claude_agent_sdk._errors import ProcessError

ANSWER = {"memories": [{"summary": "Claude extracted: the store uses WAL mode",
                        "full_content": "The team chose SQLite WAL mode for the store.", "entities": ["sqlite"],
                        "importance": "high", "kind": "decision", "scope": "project"}],
          "rolling_summary": "The session set up the store."}


def result_message(mode: str, answer: dict[str, Any]) -> dict[str, Any]:
    base = {"type": "result", "duration_ms": 12, "duration_api_ms": 10, "num_turns": 2, "session_id": "fake-session",
            "total_cost_usd": 0.0123,
            "usage": {"input_tokens": 1000, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 0,
                      "output_tokens": 150},
            "modelUsage": {"claude-haiku-4-5": {"inputTokens": 1000, "outputTokens": 150, "costUSD": 0.0123}}}
    if mode == "error":
        return {**base, "subtype": "success", "is_error": True, "api_error_status": 529,
                "result": "API Error: 529 overloaded"}
    if mode == "structured_retries":
        return {**base, "subtype": "error_max_structured_output_retries", "is_error": True,
                "errors": ["the model did not produce output matching the schema"]}
    return {**base, "subtype": "success", "is_error": False, "result": json.dumps(answer),
            "structured_output": answer}


def assistant_message(text: str) -> dict[str, Any]:
    return {"type": "assistant", "session_id": "fake-session", "parent_tool_use_id": None,
            "message": {"model": "claude-haiku-4-5", "content": [{"type": "text", "text": text}]}}


class FakeClaudeTransport(Transport):
    def __init__(self, options: Any, mode: str = "ok", answer: dict[str, Any] | None = None) -> None:
        self.options = options
        self.mode = mode
        self.answer = answer or ANSWER
        self.written: list[dict[str, Any]] = []
        self._queue: asyncio.Queue[dict[str, Any] | BaseException | None] | None = None
        self._ready = False

    async def connect(self) -> None:
        self._queue = asyncio.Queue()
        self._ready = True

    async def write(self, data: str) -> None:
        assert self._queue is not None
        for line in data.splitlines():
            if not line.strip():
                continue
            message = json.loads(line)
            self.written.append(message)
            if message.get("type") == "control_request":
                await self._queue.put({"type": "control_response", "response": {
                    "subtype": "success", "request_id": message["request_id"], "response": {}}})
            elif message.get("type") == "user":
                if self.mode == "hang":
                    continue
                if self.mode == "crash":
                    await self._queue.put(ProcessError("Command failed", exit_code=1, stderr="segfault"))
                    continue
                await self._queue.put(assistant_message("Here is the extraction."))
                await self._queue.put(result_message(self.mode, self.answer))
                await self._queue.put(None)  # the CLI exits once its stdin is closed and the turn is done

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> None:
        self._ready = False
        if self._queue is not None:
            self._queue.put_nowait(None)

    def is_ready(self) -> bool:
        return self._ready

    async def end_input(self) -> None:
        pass  # like closing the CLI's stdin: it still finishes (or hangs in) the turn it has

    @property
    def initialize_request(self) -> dict[str, Any]:
        return next(m["request"] for m in self.written if m.get("type") == "control_request"
                    and m["request"].get("subtype") == "initialize")


FAKE_CLI = r'''
import json, os, re, sys, uuid
record = {"argv": sys.argv[1:], "cwd": os.getcwd(),
          "env": {k: os.environ.get(k) for k in ("ENGRAM_AGENT_CHILD", "CLAUDE_CONFIG_DIR", "PWD")}, "stdin": []}
session = str(uuid.uuid4())
projects = os.path.join(os.environ["CLAUDE_CONFIG_DIR"], "projects", re.sub(r"[^A-Za-z0-9]", "-", os.getcwd()))
os.makedirs(projects, exist_ok=True)
transcript = os.path.join(projects, session + ".jsonl")
record["transcript"] = transcript
answer = json.loads(os.environ["FAKE_CLAUDE_ANSWER"])
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    record["stdin"].append(msg)
    if msg.get("type") == "control_request":
        send({"type": "control_response", "response": {"subtype": "success", "request_id": msg["request_id"],
                                                       "response": {}}})
    elif msg.get("type") == "user":
        with open(transcript, "a") as t:
            t.write(json.dumps({"type": "user", "sessionId": session, "cwd": os.getcwd(), "uuid": str(uuid.uuid4()),
                                "message": msg["message"]}) + "\n")
        send({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd(),
              "claude_code_version": "2.1.300", "tools": [], "mcp_servers": [], "model": "claude-haiku-4-5"})
        send({"type": "assistant", "session_id": session, "parent_tool_use_id": None,
              "message": {"model": "claude-haiku-4-5", "content": [{"type": "text", "text": "done"}]}})
        send({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 5, "duration_api_ms": 4,
              "num_turns": 2, "session_id": session, "total_cost_usd": 0.004,
              "usage": {"input_tokens": 900, "output_tokens": 120}, "result": json.dumps(answer),
              "structured_output": answer})
with open(os.environ["FAKE_CLAUDE_RECORD"], "w") as f:
    json.dump(record, f)
'''


def write_fake_cli(directory: Path) -> Path:
    """An executable `claude` in directory that runs the fake CLI with this interpreter."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "fake_claude_cli.py"
    script.write_text(FAKE_CLI)
    exe = directory / "claude"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def fake_cli_env(record: Path, answer: dict[str, Any] | None = None) -> dict[str, str]:
    return {"FAKE_CLAUDE_RECORD": str(record), "FAKE_CLAUDE_ANSWER": json.dumps(answer or ANSWER),
            "CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK": "1", "PATH": os.environ.get("PATH", "")}
