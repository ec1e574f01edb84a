"""Run the real opencode and pi CLIs (installed from npm) against a fake chat-completions API, in a world Engram
serves: the agents that load Engram as a plugin (opencode's JavaScript plugin, pi's TypeScript extension).

    with PluginAgentWorld(tmp_path, claude=ClaudeCLI.bundled(), opencode=npm_cli(OPENCODE)) as world:
        world.configure_opencode()                   # the user's opencode.json: a provider on the fake API
        world.install("opencode")                    # `engram install --agent opencode`, as a user would
        world.start_processor()
        world.opencode_run("stage the bundle", [Turn.call("bash", {"command": "ls"}), Turn("Done.")])

Each run has ``HOME`` in a temporary folder and talks to nothing but its fake API on 127.0.0.1:

- opencode: ``opencode run WORDS…`` (each word an argument: opencode quotes an argument holding a space) with a
  custom OpenAI-compatible provider in ``~/.config/opencode/opencode.json``; ``OPENCODE_DISABLE_MODELS_FETCH``
  and ``OPENCODE_DISABLE_AUTOUPDATE`` keep it off the network;
- pi: ``pi -p PROMPT --offline`` with the provider in ``~/.pi/agent/models.json`` and made the default in
  ``~/.pi/agent/settings.json``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

from bench.testbed.claude_cli import ClaudeCLI, wait_for
from tests.support.agent_cli import AgentWorld, NpmPackage, Run
from tests.support.fake_chat_completions import MODEL, FakeChatCompletions, Request, Turn

# The versions the formats and the plugin's events were checked against (docs/agents.md).
OPENCODE = NpmPackage("opencode-ai", "1.18.33", "opencode")
PI = NpmPackage("@mariozechner/pi-coding-agent", "0.73.1", "pi")


class PluginAgentWorld(AgentWorld):
    """AgentWorld (a temporary HOME, ENGRAM_HOME, a git repository, the processor, Claude Code) with opencode and
    pi beside Claude Code, both against one fake chat-completions API."""

    def __init__(self, root: Path, *, claude: ClaudeCLI | None, opencode: Path | None = None,
                 pi: Path | None = None, repo_name: str = "shop-api") -> None:
        super().__init__(root, claude=claude, repo_name=repo_name)
        self.opencode_cli, self.pi_cli = opencode, pi
        self.opencode_config = self.home / ".config" / "opencode"
        self.opencode_data = self.home / ".local" / "share" / "opencode"
        self.pi_dir = self.home / ".pi" / "agent"
        self.chat = FakeChatCompletions()
        for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "PI_CODING_AGENT_DIR"):
            self.engram_env.pop(name, None)  # the agents' folders as the processor finds them: under this HOME

    def __enter__(self) -> PluginAgentWorld:
        super().__enter__()
        self.chat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.chat.stop()

    # -- the user's own settings, before Engram is installed

    def configure_opencode(self) -> Path:
        """A user's opencode.json pointing opencode at the fake API (2-space JSON, as opencode writes it)."""
        self.opencode_config.mkdir(parents=True, exist_ok=True)
        path = self.opencode_config / "opencode.json"
        path.write_text(json.dumps({
            "$schema": "https://opencode.ai/config.json",
            "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                                  "options": {"baseURL": self.chat.base_url, "apiKey": "sk-fake-key-for-tests"},
                                  "models": {MODEL: {"name": "Fake Model"}}}},
            "model": f"fake/{MODEL}", "small_model": f"fake/{MODEL}", "autoupdate": False, "share": "disabled",
        }, indent=2) + "\n")
        return path

    def configure_pi(self) -> list[Path]:
        """A user's models.json with the fake API as a provider, made the default in settings.json."""
        self.pi_dir.mkdir(parents=True, exist_ok=True)
        models, settings = self.pi_dir / "models.json", self.pi_dir / "settings.json"
        models.write_text(json.dumps({"providers": {"fake": {
            "baseUrl": self.chat.base_url, "api": "openai-completions", "apiKey": "sk-fake-key-for-tests",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": MODEL}]}}}, indent=2) + "\n")
        settings.write_text(json.dumps({"defaultProvider": "fake", "defaultModel": MODEL}, indent=2) + "\n")
        return [models, settings]

    # -- running the CLIs

    def _chat_run(self, argv: list[str], turns: Sequence[Turn], env: dict[str, str], timeout: float) -> Run:
        self.chat.script.extend(turns)
        env["PWD"] = str(self.repo)  # opencode takes its directory from $PWD, as a shell started there sets it
        run = self._run(argv, env, timeout).check()
        assert not self.chat.script, f"unused scripted turns: {list(self.chat.script)}"
        assert not self.failures, self.failures
        return run

    def opencode_run(self, prompt: str, turns: Sequence[Turn], *, timeout: float = 240) -> Run:
        assert self.opencode_cli is not None
        env = self._env({"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"})
        return self._chat_run([str(self.opencode_cli), "run", *prompt.split(" ")], turns, env, timeout)

    def pi_run(self, prompt: str, turns: Sequence[Turn], *, timeout: float = 180) -> Run:
        assert self.pi_cli is not None
        return self._chat_run([str(self.pi_cli), "-p", prompt, "--offline"], turns, self._env({}), timeout)

    @property
    def opencode_db(self) -> Path:
        return self.opencode_data / "opencode.db"

    def pi_sessions(self) -> list[Path]:
        return sorted((self.pi_dir / "sessions").glob("--*--/*.jsonl"))

    def after_prompt(self, agent: str, prompt: str, turn: Turn, timeout: float = 30) -> Turn:
        """`turn`, once the processor has written the recollection for `prompt` in the agent's session (a real
        model takes seconds)."""
        def wait(request: Request) -> Turn:
            def ready() -> bool:
                rows = self.query("SELECT m.session_id, m.uuid FROM messages m JOIN sessions s USING (session_id) "
                                  "WHERE s.agent = ? AND m.role = 'user' AND m.text = ? ORDER BY m.id DESC",
                                  (agent, prompt))
                return bool(rows) and (self.recollection(rows[0][0]) or {}).get("messageUuid") == rows[0][1]
            try:
                wait_for(ready, timeout, f"recollection for {prompt!r}")
            except AssertionError as exc:
                self.failures.append(str(exc))
            return turn
        return Turn.from_request(wait)


def stored_uuids(engram_db: Path, uuids: list[str]) -> set[str]:
    """Those of `uuids` Engram stored: as a message's own uuid, or as a part merged into a message."""
    if not uuids or not engram_db.exists():
        return set()
    conn = apsw.Connection(str(engram_db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(1000)
    try:
        marked = json.dumps(uuids)
        return {u for (u,) in conn.execute(
            "SELECT uuid FROM messages WHERE uuid IN (SELECT value FROM json_each(?)) UNION "
            "SELECT line_uuid FROM message_lines WHERE line_uuid IN (SELECT value FROM json_each(?))",
            (marked, marked))}
    finally:
        conn.close()


class EventClock:
    """When each final part of an opencode session appears in opencode's database (its event log, polled every
    10 ms through SQLite), and when Engram has stored it: the latency of a part is the time between the two.
    Only parts capture stores count: a user's prompt (not a plugin's synthetic part), a finished answer, a
    finished tool call."""

    def __init__(self, opencode_db: Path, engram_db: Path) -> None:
        self.opencode_db, self.engram_db = opencode_db, engram_db
        self.seen: dict[str, float] = {}
        self.stored: dict[str, float] = {}
        self._rowid = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> EventClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and set(self.seen) - set(self.stored):
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()

    def _new_parts(self) -> list[str]:
        if not self.opencode_db.exists():
            return []
        found = []
        with contextlib.closing(sqlite3.connect(f"file:{self.opencode_db}?mode=ro", uri=True, timeout=1)) as conn:
            rows = conn.execute("SELECT rowid, aggregate_id, data FROM event WHERE rowid > ? AND "
                                "type = 'message.part.updated.1' ORDER BY rowid", (self._rowid,)).fetchall()
        for rowid, session_id, data in rows:
            self._rowid = rowid
            part = json.loads(data).get("part", {})
            final = (part.get("type") == "text" and not part.get("synthetic") and part.get("text", "").strip()
                     and ("time" not in part or "end" in part.get("time", {}))) or \
                (part.get("type") == "tool" and part.get("state", {}).get("status") in ("completed", "error"))
            if final:
                found.append(f"{session_id}:{part['id']}")
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with contextlib.suppress(sqlite3.Error):
                for uuid in self._new_parts():
                    self.seen.setdefault(uuid, now)
            pending = [u for u in self.seen if u not in self.stored]
            with contextlib.suppress(apsw.Error):
                for uuid in stored_uuids(self.engram_db, pending):
                    self.stored[uuid] = now
            time.sleep(0.01)

    def latencies(self) -> list[float]:
        return sorted(self.stored[u] - self.seen[u] for u in self.stored if u in self.seen)


def pi_uuid(path: Path, record: dict[str, Any]) -> str | None:
    """The message id capture stores for a pi session line (processor/capture/pi.py): prompts and answers."""
    message = record.get("message") if isinstance(record.get("message"), dict) else {}
    if record.get("type") != "message" or message.get("role") not in ("user", "assistant"):
        return None
    with open(path, "rb") as f:
        header = json.loads(f.readline())
    return f"{header['id']}:{record['id']}"
