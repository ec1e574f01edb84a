"""Run the real Codex CLI and Gemini CLI (installed from npm) against fake model APIs, in a world Engram serves.

    codex = npm_cli(CODEX)                              # None when npm is absent: skip the test
    with AgentWorld(tmp_path, claude=ClaudeCLI.bundled(), codex=codex, gemini=npm_cli(GEMINI)) as world:
        world.install("codex")                           # `engram install --agent codex`, as a user would
        world.start_processor()
        run = world.codex_run("…", [Turn.call("exec_command", {"cmd": "ls"}), Turn.text("Done.")])

The CLIs are installed once into ``~/.cache/engram-tests/npm/<package>-<version>`` (``ENGRAM_TEST_NPM_CACHE``
to put them elsewhere; CI's ``.ci/run`` fills it before the tests), pinned to the versions the formats were
checked against. Each run has ``HOME`` (and so ``~/.codex``, ``~/.gemini``, ``~/.claude``) in a temporary
folder and talks to nothing but its fake API on 127.0.0.1:

- Codex: ``codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox PROMPT`` with a custom
  provider in ``~/.codex/config.toml`` (``wire_api = "responses"``). Its hooks are NOT run with
  ``--dangerously-bypass-hook-trust``: they run because ``engram install`` recorded their trust;
- Gemini: ``gemini -m gemini-2.5-flash -p PROMPT --yolo --skip-trust`` with ``GEMINI_API_KEY``,
  ``GOOGLE_GEMINI_BASE_URL`` and ``security.auth.selectedType = "gemini-api-key"`` in ``~/.gemini/settings.json``
  (without it headless mode exits 41).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from bench.testbed.claude_cli import _SCRUBBED, _SCRUBBED_PREFIXES, ClaudeCLI, EngramClaude
from tests.support.fake_gemini import FakeGemini
from tests.support.fake_gemini import Turn as GeminiTurn
from tests.support.fake_openai_responses import FakeResponses
from tests.support.fake_openai_responses import Turn as CodexTurn


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str
    command: str

    @property
    def folder(self) -> str:
        return f"{self.name.rsplit('/', 1)[-1]}-{self.version}"


# The versions the formats and hook semantics were checked against (docs/agents.md).
CODEX = NpmPackage("@openai/codex", "0.171.0", "codex")
GEMINI = NpmPackage("@google/gemini-cli", "0.61.0", "gemini")
COPILOT = NpmPackage("@github/copilot", "1.0.102", "copilot")
QWEN = NpmPackage("@qwen-code/qwen-code", "0.24.4", "qwen")
# Node itself, from the npm registry (the `node` package installs the official binary): Qwen Code needs Node >= 22,
# and under an older Node npm silently installs an old Qwen.
NODE_22 = NpmPackage("node", "22.23.3", "node")


def npm_cache() -> Path:
    configured = os.environ.get("ENGRAM_TEST_NPM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "engram-tests" / "npm"


def npm_cli(package: NpmPackage) -> Path | None:
    """The package's command, installed into the cache on first use; None only when npm is not installed.

    A failed install (no network, a broken registry) raises: a test that cannot get its CLI fails, it is not
    skipped.
    """
    prefix = npm_cache() / package.folder
    command = prefix / "node_modules" / ".bin" / package.command
    if command.exists():
        return command
    npm = shutil.which("npm")
    if npm is None:
        return None
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{package.folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (parallel runs, CI's pre-install)
        if not command.exists():
            done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                                   "--loglevel=error", f"{package.name}@{package.version}"],
                                  capture_output=True, text=True, timeout=900)
            if done.returncode != 0 or not command.exists():
                raise RuntimeError(f"npm install {package.name}@{package.version} failed ({done.returncode}):\n"
                                   f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return command


def skip_reason(package: NpmPackage) -> str:
    return f"npm is not installed: the real {package.command} CLI ({package.name}@{package.version}) cannot be had"


@dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def check(self) -> Run:
        if self.returncode != 0:
            raise AssertionError(f"{self.argv[0]} exited {self.returncode}:\n{self.stdout[-3000:]}\n"
                                 f"{self.stderr[-3000:]}")
        return self


class AgentWorld(EngramClaude):
    """EngramClaude's world (a temporary HOME, ENGRAM_HOME, a git repository, the processor) with the Codex CLI
    and the Gemini CLI beside Claude Code, each against its own fake API."""

    def __init__(self, root: Path, *, claude: ClaudeCLI | None, codex: Path | None = None,
                 gemini: Path | None = None, repo_name: str = "shop-api") -> None:
        super().__init__(root, claude, repo_name)  # type: ignore[arg-type]
        self.codex_cli, self.gemini_cli = codex, gemini
        self.codex_home = self.home / ".codex"
        self.gemini_dir = self.home / ".gemini"
        self.responses = FakeResponses()
        self.gemini_api = FakeGemini()
        # The agents' folders as the processor finds them: under this HOME (not the test process's CODEX_HOME).
        self.engram_env["CODEX_HOME"] = str(self.codex_home)
        self.engram_env.pop("GEMINI_CLI_HOME", None)

    def __enter__(self) -> AgentWorld:
        super().__enter__()
        self.responses.start()
        self.gemini_api.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.responses.stop()
            self.gemini_api.stop()

    # -- the user's own settings, before Engram is installed

    def configure_codex(self) -> None:
        """A user's config.toml pointing Codex at the fake API (and hooks.json with a hook of their own)."""
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(
            '# my Codex settings\nmodel = "gpt-5-fake"\nmodel_provider = "fake"\n\n[model_providers.fake]\n'
            f'name = "fake"\nbase_url = "{self.responses.base_url}"\nwire_api = "responses"\n'
            'env_key = "FAKE_OPENAI_KEY"\n')

    def configure_gemini(self) -> None:
        self.gemini_dir.mkdir(parents=True, exist_ok=True)
        (self.gemini_dir / "settings.json").write_text(json.dumps(
            {"security": {"auth": {"selectedType": "gemini-api-key"}}, "ui": {"hideTips": True}}, indent=2) + "\n")

    def install(self, agent: str = "claude", *extra: str) -> str:  # type: ignore[override]
        return self.engram("install", "--agent", agent, *extra).stdout

    def uninstall(self, agent: str) -> str:
        return self.engram("uninstall", "--agent", agent).stdout

    # -- running the CLIs

    def _env(self, extra: Mapping[str, str]) -> dict[str, str]:
        # Not the test's own pointers away from the machine's agents (tests/conftest.py): the CLIs find their
        # folders under this world's HOME, as the processor does.
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED
               and not k.startswith(("OPENAI_", "CODEX_", "GEMINI_"))
               and k not in ("XDG_DATA_HOME", "PI_CODING_AGENT_DIR")}
        env.update({"HOME": str(self.home), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                    "NO_COLOR": "1", "TERM": "dumb"})
        env.update({k: v for k, v in self.engram_env.items() if k.startswith("ENGRAM_") or k == "CODEX_HOME"})
        env.update(extra)
        return env

    def _run(self, argv: list[str], env: Mapping[str, str], timeout: float) -> Run:
        started = time.monotonic()
        done = subprocess.run(argv, cwd=self.repo, env=dict(env), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        return Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def codex_run(self, prompt: str, turns: Sequence[CodexTurn], *, resume: str | None = None,
                  timeout: float = 120) -> Run:
        assert self.codex_cli is not None
        self.responses.script.extend(turns)
        argv = [str(self.codex_cli), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        argv += (["resume", resume, prompt] if resume else [prompt])
        run = self._run(argv, self._env({"FAKE_OPENAI_KEY": "sk-fake-key-for-tests"}), timeout).check()
        assert not self.responses.script, f"unused scripted turns: {list(self.responses.script)}"
        assert not self.failures, self.failures
        return run

    def gemini_run(self, prompt: str, turns: Sequence[GeminiTurn], *, timeout: float = 120) -> Run:
        assert self.gemini_cli is not None
        self.gemini_api.script.extend(turns)
        argv = [str(self.gemini_cli), "-m", "gemini-2.5-flash", "-p", prompt, "--yolo", "--skip-trust"]
        env = self._env({"GEMINI_API_KEY": "fake-gemini-key-for-tests",
                         "GOOGLE_GEMINI_BASE_URL": self.gemini_api.base_url})
        run = self._run(argv, env, timeout).check()
        assert not self.gemini_api.script, f"unused scripted turns: {list(self.gemini_api.script)}"
        assert not self.failures, self.failures
        return run

    # -- what Engram stored

    def sessions_of(self, agent: str) -> list[str]:
        return [sid for (sid,) in self.query("SELECT session_id FROM sessions WHERE agent = ? ORDER BY created_at",
                                             (agent,))]

    def lesson(self, text: str, timeout: float = 60) -> str:
        """The id of the lesson (a gotcha or a convention: what is told unasked) that holds `text`, once stored."""
        def stored() -> str | None:
            with contextlib.suppress(apsw.SQLError, apsw.SchemaChangeError):
                for episode_id, summary, content in self.query(
                        "SELECT id, summary, full_content FROM episodes WHERE status = 'active' "
                        "AND kind IN ('gotcha', 'convention')"):
                    if text in summary or text in content:
                        return episode_id
            return None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = stored()
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no lesson holding {text!r} within {timeout} s: "
                             f"{self.query('SELECT kind, summary FROM episodes')}")


class CaptureClock:
    """When each line of an agent's session files appears on disk, and when the processor has stored it.

    A thread polls the files (every 10 ms) and the database: the latency of a line is the time from the first
    poll that saw it to the first that found its message stored. Lines that are never stored (context the
    agent injected, records that are not conversation) are left out; the captured content is checked
    elsewhere.
    """

    def __init__(self, db: Path, files: Callable[[], list[Path]], uuid_of: Callable[[Path, dict[str, Any]], str | None]
                 ) -> None:
        self.db, self.files, self.uuid_of = db, files, uuid_of
        self.seen: dict[str, float] = {}
        self.stored: dict[str, float] = {}
        self._offsets: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CaptureClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 5  # lines written at the very end get their chance to be stored
        while time.monotonic() < deadline and set(self.seen) - set(self.stored):
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            now = time.monotonic()
            for path in self.files():
                with contextlib.suppress(OSError):
                    with open(path, "rb") as f:
                        f.seek(self._offsets.get(path, 0))
                        data = f.read()
                    end = data.rfind(b"\n") + 1
                    self._offsets[path] = self._offsets.get(path, 0) + end
                    for line in data[:end].splitlines():
                        with contextlib.suppress(ValueError):
                            uuid = self.uuid_of(path, json.loads(line))
                            if uuid and uuid not in self.seen:
                                self.seen[uuid] = now
            pending = [u for u in self.seen if u not in self.stored]
            if pending and self.db.exists():
                try:
                    conn = conn or apsw.Connection(str(self.db), flags=apsw.SQLITE_OPEN_READONLY)
                    conn.set_busy_timeout(1000)
                    for (uuid,) in conn.execute("SELECT uuid FROM messages WHERE uuid IN (SELECT value FROM "
                                                "json_each(?))", (json.dumps(pending),)):
                        self.stored[uuid] = now
                except (apsw.SQLError, apsw.SchemaChangeError, apsw.BusyError, apsw.CantOpenError):
                    pass
            time.sleep(0.01)
        if conn is not None:
            conn.close()

    def latencies(self) -> list[float]:
        return sorted(self.stored[u] - self.seen[u] for u in self.stored if u in self.seen)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
