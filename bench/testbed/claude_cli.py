"""Run the real Claude Code CLI (the one the claude-agent-sdk wheel bundles) against a fake Messages API.

    cli = ClaudeCLI.bundled()                     # None when the SDK ships no CLI: skip the test
    env = cli_env(home, base_url=server.base_url, extra={"ENGRAM_HOME": ...})
    first = cli.run("How do I ...?", cwd=repo, env=env)
    second = cli.run("And ...?", cwd=repo, env=env, resume=first.session_id)

Every run is ``claude -p PROMPT --output-format json|stream-json --dangerously-skip-permissions``
with ``HOME`` a temporary folder, so the user's own settings, credentials and transcripts are never
read, and with ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``, so the CLI talks to nothing but
``ANTHROPIC_BASE_URL``. As root, ``--dangerously-skip-permissions`` is refused unless ``IS_SANDBOX=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from bench.testbed.fake_anthropic import FakeAnthropic, Reply, Request

# Variables of the test process that must not reach the CLI: they would point it at a real account,
# a real config folder or a real API.
_SCRUBBED_PREFIXES = ("ANTHROPIC_", "CLAUDE", "ENGRAM_", "AWS_", "GOOGLE_", "VERTEX_", "OTEL_", "MCP_")
_SCRUBBED = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NODE_OPTIONS"}


def bundled_cli_path() -> Path | None:
    """The Claude Code binary inside the installed claude-agent-sdk package, if it ships one."""
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    name = "claude.exe" if os.name == "nt" else "claude"
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def cli_env(home: Path, *, base_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CLI's whole environment: this process's minus anything account- or Engram-related, plus a fake API."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED}
    env.update({
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-api03-fake-key-for-tests-only",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    })
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # otherwise root may not use --dangerously-skip-permissions
    env.update(extra or {})
    return env


@dataclass
class RunResult:
    """One `claude -p` run: its exit status, parsed output and timing."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)  # stream-json: every line; json: the one object

    @property
    def result(self) -> dict[str, Any]:
        """The final ``{"type": "result", ...}`` object."""
        for event in reversed(self.events):
            if event.get("type") == "result":
                return event
        raise AssertionError(f"no result in the CLI's output:\n{self.stdout[-2000:]}\n{self.stderr[-2000:]}")

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])

    @property
    def text(self) -> str:
        return str(self.result.get("result", ""))

    def check(self) -> RunResult:
        """Raise with the CLI's output unless it exited 0 with a successful result."""
        if self.returncode != 0 or self.result.get("is_error") or self.result.get("subtype") != "success":
            raise AssertionError(f"claude exited {self.returncode}: {self.stdout[-3000:]}\n{self.stderr[-3000:]}")
        return self


@dataclass(frozen=True)
class ClaudeCLI:
    path: Path

    @classmethod
    def bundled(cls) -> ClaudeCLI | None:
        path = bundled_cli_path()
        return None if path is None else cls(path)

    def version(self) -> str:
        done = subprocess.run([str(self.path), "--version"], capture_output=True, text=True, timeout=30,
                              env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")})
        return done.stdout.strip()

    def run(self, prompt: str, *, cwd: Path, env: Mapping[str, str], resume: str | None = None,
            output_format: str = "json", extra_args: Sequence[str] = (), timeout: float = 60) -> RunResult:
        argv = [str(self.path), "-p", prompt, "--output-format", output_format, "--dangerously-skip-permissions"]
        if output_format == "stream-json":
            argv.append("--verbose")  # required by the CLI for stream-json with -p
        if resume:
            argv += ["--resume", resume]
        argv += list(extra_args)
        started = time.monotonic()
        done = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        events = []
        for line in done.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):  # a stray line that only looks like JSON
                    events.append(json.loads(line))
        return RunResult(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started, events)


# ---------------------------------------------------------------- Engram installed into a throw-away home

# What Engram injects, as the hooks write it (recall_hook/pretooluse.py, processor/recall/digest.py).
FENCE_OPEN = "<engram-recollection>"
FENCE_CLOSE = "</engram-recollection>"
BITES_HEADER = "You have memories related to this conversation:"
DIGEST_HEADER = "Engram memory digest:"
ENGRAM_TOOLS = ("mcp__engram__memory_recall", "mcp__engram__memory_expand", "mcp__engram__memory_remember",
                "mcp__engram__memory_forget",
                "mcp__engram__memory_status")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s")


class EngramClaude:
    """A temporary HOME with Engram installed (`engram install`), its processor, a fake Messages API and the CLI.

        with EngramClaude(tmp_path, cli) as world:
            world.install()
            world.remember("...", kind="preference", scope="global")
            world.start_processor()
            world.wait_for_memories("...")
            run = world.ask("a prompt", [Reply.tool(...), Reply.text("...")])

    Layout under `root`: ``home/`` (HOME: ``.claude/settings.json``, ``.claude.json``,
    ``.claude/projects/``), ``engram-home/`` (ENGRAM_HOME) and ``code/<repo>/`` (a git repository,
    the sessions' working directory and so Engram's project).
    """

    def __init__(self, root: Path, cli: ClaudeCLI, repo_name: str = "shop-api") -> None:
        self.root = root
        self.cli = cli
        self.home = root / "home"
        self.engram_home = root / "engram-home"
        self.projects = self.home / ".claude" / "projects"
        self.repo = root / "code" / repo_name
        self.server = FakeAnthropic()
        self.processor: subprocess.Popen[str] | None = None
        self.failures: list[str] = []  # problems met inside the fake model's dynamic replies
        self.home.mkdir(parents=True)
        self.repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True, capture_output=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED}
        env.update({"HOME": str(self.home), "ENGRAM_HOME": str(self.engram_home), "ENGRAM_HTTP_PORT": "0"})
        if os.environ.get("ENGRAM_MODELS_DIR"):  # tests/conftest.py: one converted embedding model per run
            env["ENGRAM_MODELS_DIR"] = os.environ["ENGRAM_MODELS_DIR"]
        self.engram_env = env

    # -- lifecycle

    def __enter__(self) -> EngramClaude:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.processor is not None and self.processor.poll() is None:
                self.stop_processor()
        finally:
            self.server.stop()

    @property
    def cli_env(self) -> dict[str, str]:
        engram = {k: v for k, v in self.engram_env.items() if k.startswith("ENGRAM_")}
        return cli_env(self.home, base_url=self.server.base_url, extra=engram)

    def engram(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real `engram` command, run with this world's HOME and ENGRAM_HOME."""
        done = subprocess.run([sys.executable, "-m", "processor.cli", *args], cwd=cwd or self.repo,
                              env=self.engram_env, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"engram {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def install(self) -> None:
        self.engram("install")

    def record_hook_inputs(self, *events: str) -> Path:
        """Add a hook of the user's own for `events`, next to Engram's, that keeps every event's stdin.

        Returns the folder; `hook_inputs()` reads it back.
        """
        folder = self.root / "hook-inputs"
        folder.mkdir(exist_ok=True)
        path = self.home / ".claude" / "settings.json"
        settings = json.loads(path.read_text())
        command = f'cat > "$(mktemp -p {shlex.quote(str(folder))} XXXXXXXX.json)"'
        for event in events:
            settings.setdefault("hooks", {}).setdefault(event, []).append(
                {"hooks": [{"type": "command", "command": command}]})
        path.write_text(json.dumps(settings, indent=2))
        return folder

    def hook_inputs(self, event: str) -> list[dict[str, Any]]:
        """The stdin of every `event` hook call recorded by `record_hook_inputs`, oldest first."""
        inputs = []
        for path in (self.root / "hook-inputs").glob("*.json"):
            data = json.loads(path.read_text())
            if data.get("hook_event_name") == event:
                inputs.append((path.stat().st_mtime_ns, data))
        return [data for _, data in sorted(inputs, key=lambda pair: pair[0])]

    def remember(self, text: str, *, kind: str, scope: str) -> None:
        self.engram("remember", text, "--kind", kind, "--scope", scope)

    def start_processor(self) -> None:
        # Claude Code creates the folder on its first session; the processor only watches one that exists.
        self.projects.mkdir(parents=True, exist_ok=True)
        self.processor = subprocess.Popen(
            [sys.executable, "-m", "processor.cli", "run", "--projects-dir", str(self.projects)],
            cwd=self.repo, env=self.engram_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        port_file = self.engram_home / "run" / "engram.port"
        wait_for(lambda: port_file.exists() or self.processor.poll() is not None, 60, "processor start")
        if self.processor.poll() is not None:
            raise AssertionError(f"the processor exited {self.processor.returncode}: {self.processor.communicate()}")

    def stop_processor(self) -> tuple[int, str]:
        """SIGTERM the processor; its exit status and stderr."""
        assert self.processor is not None
        self.processor.send_signal(signal.SIGTERM)
        try:
            _out, err = self.processor.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.processor.kill()
            _out, err = self.processor.communicate()
            err += "\n(the processor did not stop within 30 s of SIGTERM; killed)"
        return self.processor.returncode, err

    # -- the database, read-only

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        db = self.engram_home / "engram.db"
        if not db.exists():
            return []
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(5000)
        try:
            return list(conn.execute(sql, params))
        finally:
            conn.close()

    def backdate(self, episode_id: str, days: float, importance: str = "normal") -> None:
        """Make a stored memory older and ordinary, so the SessionStart digest leaves it out."""
        conn = apsw.Connection(str(self.engram_home / "engram.db"))
        conn.set_busy_timeout(5000)
        try:
            conn.execute("UPDATE episodes SET created_at = created_at - ?, importance = ? WHERE id = ?",
                         (int(days * 86_400_000), importance, episode_id))
        finally:
            conn.close()

    def wait_for_memories(self, *texts: str, timeout: float = 30) -> dict[str, str]:
        """Wait until a memory with each of `texts` as its full content is stored; text → id."""
        def stored() -> dict[str, str] | None:
            try:
                rows = self.query("SELECT full_content, id FROM episodes WHERE status = 'active'")
            except (apsw.SQLError, apsw.SchemaChangeError):  # the processor is still creating the schema
                return None
            found = {text: episode_id for text, episode_id in rows if text in texts}
            return found if len(found) == len(set(texts)) else None
        return wait_for(stored, timeout, f"memories stored: {texts}")

    def captured_texts(self) -> list[str]:
        """Every message text the processor captured, in order."""
        return [row[0] for row in self.query("SELECT text FROM messages ORDER BY id")]

    # -- Claude Code's side

    def transcript(self, session_id: str) -> Path | None:
        return next(self.projects.glob(f"*/{session_id}.jsonl"), None)

    def prompt_uuid(self, session_id: str, prompt: str) -> str | None:
        """The uuid of the user line Claude Code wrote for `prompt` in the session's transcript."""
        path = self.transcript(session_id)
        if path is None:
            return None
        found = None
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written
            if entry.get("type") == "user" and entry.get("message", {}).get("content") == prompt:
                found = entry.get("uuid")
        return found

    def recollection(self, session_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.engram_home / "recollections" / f"{session_id}.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def after_recollection(self, prompt: str, reply: Reply, timeout: float = 20) -> Reply:
        """`reply`, sent once the processor has written the recollection for `prompt`.

        A real model takes seconds to answer; the fake one answers in a millisecond, before the
        processor could have read the new user line. This stands in for the model's thinking time.
        """
        def wait(request: Request) -> Reply:
            session_id = request.session_id or ""
            try:
                wait_for(lambda: (uuid := self.prompt_uuid(session_id, prompt)) is not None
                         and (self.recollection(session_id) or {}).get("messageUuid") == uuid, timeout,
                         f"recollection for {prompt!r}")
            except AssertionError as exc:
                self.failures.append(str(exc))
            return reply
        return Reply.from_request(wait)

    def once_tools_announced(self, reply: Reply, tools: Sequence[str] = ENGRAM_TOOLS, tries: int = 40) -> Reply:
        """`reply` once a request announces `tools`; until then the model runs `sleep 0.25` and asks again.

        Claude Code connects MCP servers in the background (MCP_CONNECTION_NONBLOCKING defaults to
        on), so the first requests of a session may not know Engram's tools yet.
        """
        left = [tries]

        def check(request: Request) -> Reply:
            if all(name in request.tool_names or name in request.all_text() for name in tools):
                return reply
            left[0] -= 1
            if left[0] <= 0:
                self.failures.append(f"{tools} never announced: tools were {request.tool_names}")
                return reply
            self.server.script.appendleft(Reply.from_request(check))
            return Reply.tool("Bash", {"command": "sleep 0.25", "description": "Wait"})
        return Reply.from_request(check)

    def ask(self, prompt: str, replies: Sequence[Reply], *, resume: str | None = None,
            output_format: str = "json", env: Mapping[str, str] | None = None, cwd: Path | None = None) -> RunResult:
        """One user message: script the model's turns, run `claude -p` in `cwd` (default: the repository; with `env`
        added to its environment), and check it went through."""
        self.server.script.extend(replies)
        run = self.cli.run(prompt, cwd=cwd or self.repo, env={**self.cli_env, **(env or {})}, resume=resume,
                           output_format=output_format)
        run.check()
        assert not self.server.script, f"unused scripted turns: {list(self.server.script)}"
        assert not self.failures, self.failures
        return run
