"""Run the real GitHub Copilot CLI and Qwen Code (installed from npm) against a fake chat completions API, in a
world Engram serves beside the real Claude Code CLI (``agent_cli.AgentWorld``).

    copilot, qwen = npm_cli(COPILOT), qwen_cli()     # None when npm is absent: skip the test
    with CopilotQwenWorld(tmp_path, claude=ClaudeCLI.bundled(), copilot=copilot, qwen=qwen) as world:
        world.install("copilot")                     # `engram install --agent copilot`, as a user would
        world.start_processor()
        run = world.copilot_run("…", [Turn.call("bash", {"command": "ls"}), Turn.text_only("Done.")])

Each run has ``HOME`` (and so ``~/.copilot``, ``~/.qwen``, ``~/.claude``) in a temporary folder and talks to
nothing but its fake API on 127.0.0.1:

- Copilot: ``copilot -p PROMPT --allow-all-tools`` with its bring-your-own-key provider (``COPILOT_PROVIDER_BASE_URL``,
  ``COPILOT_MODEL``; no GitHub login) and ``COPILOT_OFFLINE=true`` (no auth, telemetry or update lookups). Its
  first start unpacks its package (~235 MB) into a cache folder, shared here by every test of the run;
- Qwen Code: ``qwen -p PROMPT --yolo`` with ``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENAI_MODEL``, under Node 22
  from the npm registry (Qwen needs Node >= 22), with its usage statistics off in the user's settings.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.testbed.claude_cli import ClaudeCLI
from tests.support.agent_cli import NODE_22, QWEN, AgentWorld, Run, npm_cache, npm_cli
from tests.support.fake_chat_completions import MODEL, FakeChatCompletions, Turn

# The CLIs' own variables that a test process may carry and that must not reach them (an account, a token).
_SCRUBBED_PREFIXES = ("COPILOT_", "QWEN_", "GH_", "GITHUB_", "OPENAI_", "DASHSCOPE_")


def qwen_cli() -> Path | None:
    """Qwen Code's command with Node 22 beside it (both from npm); None only when npm is not installed."""
    node = npm_cli(NODE_22)
    return None if node is None else npm_cli(QWEN)


class CopilotQwenWorld(AgentWorld):
    """AgentWorld's world with the Copilot CLI and Qwen Code beside Claude Code, against one fake chat API."""

    def __init__(self, root: Path, *, claude: ClaudeCLI | None, copilot: Path | None = None,
                 qwen: Path | None = None, repo_name: str = "shop-api") -> None:
        super().__init__(root, claude=claude, repo_name=repo_name)
        self.copilot_cli, self.qwen_cli = copilot, qwen
        self.copilot_dir = self.home / ".copilot"
        self.qwen_dir = self.home / ".qwen"
        self.chat_api = FakeChatCompletions()
        # The agents' folders as the processor and `engram install` find them: under this HOME.
        self.engram_env["COPILOT_HOME"] = str(self.copilot_dir)
        self.engram_env["QWEN_HOME"] = str(self.qwen_dir)
        self.engram_env.pop("QWEN_RUNTIME_DIR", None)

    def __enter__(self) -> CopilotQwenWorld:
        super().__enter__()
        self.chat_api.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self.chat_api.stop()

    # -- the user's own settings, before Engram is installed

    def configure_copilot(self) -> list[Path]:
        """A user's Copilot folder with a hook of their own: the files Engram's install and uninstall may touch, which
        uninstall must give back (Copilot rewrites its own config.json on start: not Engram's to keep)."""
        (self.copilot_dir / "hooks").mkdir(parents=True, exist_ok=True)
        (self.copilot_dir / "hooks" / "mine.json").write_text(json.dumps(
            {"version": 1, "hooks": {"sessionEnd": [{"type": "command", "bash": "true", "timeoutSec": 5}]}}, indent=2))
        return [self.copilot_dir / "hooks" / "mine.json", self.copilot_dir / "hooks" / "engram.json",
                self.copilot_dir / "mcp-config.json", self.copilot_dir / "settings.json"]

    def configure_qwen(self) -> Path:
        """A user's Qwen settings.json (as Qwen leaves it after its first start: with its settings version)."""
        self.qwen_dir.mkdir(parents=True, exist_ok=True)
        path = self.qwen_dir / "settings.json"
        path.write_text(json.dumps({"security": {"auth": {"selectedType": "openai"}}, "model": {"name": MODEL},
                                    "privacy": {"usageStatisticsEnabled": False}, "$version": 4}, indent=2) + "\n")
        return path

    # -- running the CLIs

    def _env(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in super()._env({}).items() if not k.startswith(_SCRUBBED_PREFIXES)}
        env.update(extra)
        return env

    def _chat_run(self, argv: list[str], env: dict[str, str], turns: Sequence[Turn], timeout: float) -> Run:
        self.chat_api.script.extend(turns)
        run = self._run(argv, self._env(env), timeout).check()
        assert not self.chat_api.script, f"unused scripted turns: {list(self.chat_api.script)}"
        assert not self.failures, self.failures
        return run

    def copilot_run(self, prompt: str, turns: Sequence[Turn], *, timeout: float = 180) -> Run:
        assert self.copilot_cli is not None
        env = {"COPILOT_PROVIDER_BASE_URL": self.chat_api.base_url, "COPILOT_PROVIDER_API_KEY": "sk-fake-for-tests",
               "COPILOT_MODEL": MODEL, "COPILOT_OFFLINE": "true", "COPILOT_AUTO_UPDATE": "false",
               # Its package unpacked once for every test of the run, not once per HOME.
               "COPILOT_CACHE_HOME": str(npm_cache() / "copilot-cache")}
        return self._chat_run([str(self.copilot_cli), "-p", prompt, "--allow-all-tools"], env, turns, timeout)

    def qwen_run(self, prompt: str, turns: Sequence[Turn], *, timeout: float = 180) -> Run:
        assert self.qwen_cli is not None
        node = npm_cache() / NODE_22.folder / "node_modules" / ".bin"
        env = {"PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}", "OPENAI_BASE_URL": self.chat_api.base_url,
               "OPENAI_API_KEY": "sk-fake-for-tests", "OPENAI_MODEL": MODEL, "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
        return self._chat_run([str(self.qwen_cli), "-p", prompt, "--yolo"], env, turns, timeout)

    # -- where their sessions are

    def copilot_sessions(self) -> list[Path]:
        return sorted((self.copilot_dir / "session-state").glob("*/events.jsonl"))

    def qwen_chats(self) -> list[Path]:
        return sorted((self.qwen_dir / "projects").glob("*/chats/*.jsonl"))
