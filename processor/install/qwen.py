"""Register Engram with Qwen Code: hooks and the MCP server in ``~/.qwen/settings.json`` (``$QWEN_HOME`` instead
of ``~/.qwen`` when set).

Qwen Code is a fork of the Gemini CLI whose hooks are Claude Code's: the same shape in settings.json, the same
snake_case input (with Qwen's own tool names, ``run_shell_command``…), ``hookSpecificOutput.additionalContext``
read from the answer (HTML-escaped, ``<`` and ``>``, on the way to the model). What gets registered (the same hook
scripts as Claude Code's, named for Qwen by an argument after the script):

- ``SessionStart``: ``recall_hook/session_start.py qwen`` — the digest, at the end of the system prompt;
- ``PostToolUse`` and ``PostToolUseFailure`` (matcher ``*``): ``recall_hook/pretooluse.py qwen`` — the bites of
  the user's message and what earlier sessions left about the file or command, appended to the call's result,
  and after a failed call (a shell command that exited non-zero is one) what fixed the same failure. Qwen drops
  a PreToolUse hook's context (it only logs it), so after the call is the nearest moment;
- optionally ``UserPromptSubmit`` (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py qwen``.
  Qwen runs it before every model request, not once a prompt; the hook answers only the one that carries the
  prompt (the others have ``prompt: ""``);
- MCP server ``engram`` in ``mcpServers``: ``<engram's python> -I -m mcp_tools.bridge`` with ``alwaysLoadTools``
  (else Qwen defers its tools behind ``tool_search`` and ``tool_call``, two round trips more); the model sees
  ``mcp__engram__memory_recall``, … Qwen passes the server its own environment.

Timeouts are in seconds (Qwen's unit). The file is edited as ``json_file`` edits any agent's settings: Engram's
entries only, a backup first, an atomic write, the indentation kept; uninstall removes exactly what install added.
Qwen writes the file itself once, to stamp a settings version (``"$version": 4``) on a file without it: install
and uninstall keep that key like any other. Qwen reads the file with comments (as the Gemini CLI
does): they are kept, like every other byte install does not change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, error, passed, shown_path
from processor.config import AGENT_NAMES, Settings, qwen_config_dir
from processor.install import json_file
from processor.install.json_file import ChangeReport
from processor.install.registration import EVENTS_AND_MARKERS, MCP_SERVER_NAME, HookSpec, Registration, on_this_machine
from processor.install.settings_json import SettingsFile, after_call_hooks, registered

NAME = "qwen"
TITLE = AGENT_NAMES[NAME]
COMMAND = "qwen"  # on PATH when Qwen Code is installed
SETTINGS_FILE = "settings.json"
FIX = "engram install --agent qwen"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return qwen_config_dir(env) / SETTINGS_FILE


def settings_file(path: Path) -> SettingsFile:
    return SettingsFile(path, TITLE, f"qwen mcp remove {MCP_SERVER_NAME}", comments=True)


def found(env: Mapping[str, str] | None = None) -> bool:
    """Qwen Code is here: its folder ($QWEN_HOME, ~/.qwen) exists, or `qwen` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([qwen_config_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), under Qwen's (Claude Code's) event names: Qwen drops a PreToolUse hook's context, so a
    call's lessons, bites and fixes go with its result."""
    return after_call_hooks(registration, NAME)


def server_entry(registration: Registration) -> dict[str, Any]:
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args), "alwaysLoadTools": True}


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            path: Path | None = None,
            **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
            ) -> ChangeReport:
    """Register Engram's hooks and MCP server in Qwen Code's settings.json (`path`, default from `env`)."""
    return settings_file(path or settings_path(env)).install(registration, hook_specs(registration),
                                                             server_entry(registration), dry_run=dry_run)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None, path: Path | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; a missing file is not created."""
    return settings_file(path or settings_path(env)).uninstall(dry_run=dry_run)


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of Qwen Code: Engram's hooks and MCP server in its settings.json, hooks not switched off."""
    return [_check(settings_path(env), env)]


def _check(path: Path, env: Mapping[str, str]) -> Check:
    if not on_this_machine([path.parent], COMMAND, env):
        return passed(TITLE, f"not installed here ({shown_path(path.parent, env)} does not exist); nothing to check")
    shown = shown_path(path, env)
    data = json_file.read_registered(TITLE, path, env, absent="Engram's hooks are not registered", fix=FIX,
                                     unusable="Qwen Code cannot read it either",
                                     unusable_fix=f"fix {shown}, then {FIX}", comments=True)
    if isinstance(data, Check):
        return data
    if data.get("disableAllHooks") is True:
        return error(TITLE, f"hooks are switched off in {shown} (disableAllHooks): Engram's are never run",
                     "remove disableAllHooks from that file")
    specs = [spec for spec, required in hook_specs(EVENTS_AND_MARKERS) if required]
    return registered(TITLE, specs, data, path, data, path, env, FIX)
