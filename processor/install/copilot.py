"""Register Engram with the GitHub Copilot CLI: its hooks in a file of its own, ``~/.copilot/hooks/engram.json``,
and the MCP server in ``~/.copilot/mcp-config.json`` (``$COPILOT_HOME`` instead of ``~/.copilot`` when set).

Copilot reads every ``*.json`` in its hooks folder, and reads hooks in Claude Code's shape there too (PascalCase
events, ``[{"matcher", "hooks": [{"type": "command", "command", "timeout"}]}]``), speaking Claude Code's protocol
to them: snake_case input with ``hook_event_name`` and Claude Code's tool names (``bash`` is ``Bash``), and a
context read at the answer's top level (``hookSpecificOutput`` for PreToolUse) — the hooks print both. What gets
registered (the same hook scripts as Claude Code's, named for Copilot by an argument after the script):

- ``SessionStart``: ``recall_hook/session_start.py copilot`` — the digest; Copilot puts it before the prompt;
- ``PostToolUse`` and ``PostToolUseFailure`` (matcher ``*``): ``recall_hook/pretooluse.py copilot`` — the bites
  of the user's message and what earlier sessions left about the file or command, and right after a failed call
  what fixed the same failure. Copilot delivers a PreToolUse hook's context only after the call's result, so
  there is no earlier moment; a shell command that exits non-zero is a *successful* call to Copilot
  (PostToolUse), whose failure the hook reads from the result's ``completed with exit code N``;
- optionally ``UserPromptSubmit`` (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py copilot``;
- MCP server ``engram`` in ``mcp-config.json``: ``<engram's python> -I -m mcp_tools.bridge``; Copilot shows its
  tools to the model as ``engram-memory_recall``, … and passes the server its own environment.

Both files are edited as ``json_file`` edits any agent's settings (Engram's entries only, a backup first, an
atomic write); both are read before either is written, so an invalid one is an error naming it and the fix, and
nothing is written. Uninstall removes exactly what install added: the hooks file is Engram's alone and goes
(with the hooks folder, when install made it and nothing else is in it), as does an MCP file left empty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, error, passed, shown_path
from processor.config import AGENT_NAMES, Settings, copilot_config_dir
from processor.install import json_file
from processor.install.json_file import ChangeReport, FileChange
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    MCP_SERVER_NAME,
    HookSpec,
    InstallError,
    Registration,
    on_this_machine,
)
from processor.install.settings_json import after_call_hooks, registered

NAME = "copilot"
TITLE = AGENT_NAMES[NAME]
COMMAND = "copilot"  # on PATH when the Copilot CLI is installed
HOOKS_FILE = Path("hooks") / "engram.json"
MCP_FILE = "mcp-config.json"
SETTINGS_FILE = "settings.json"  # Copilot's own settings: only read, for `disableAllHooks`
HOOKS_VERSION = 1  # the hooks file's schema version
FIX = "engram install --agent copilot"


def found(env: Mapping[str, str] | None = None) -> bool:
    """The Copilot CLI is here: its folder ($COPILOT_HOME, ~/.copilot) exists, or `copilot` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([copilot_config_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), in Claude Code's shape under Claude Code's event names: Copilot reads a call's context
    only after the call, so its lessons, bites and fixes all go with its result."""
    return after_call_hooks(registration, NAME)


def server_entry(registration: Registration) -> dict[str, Any]:
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args)}


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            copilot_dir: Path | None = None,
            **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
            ) -> ChangeReport:
    """Register Engram's hooks and MCP server with the Copilot CLI in `copilot_dir` (default: $COPILOT_HOME,
    ~/.copilot)."""
    folder = copilot_dir or copilot_config_dir(env)
    hooks_path, mcp_path = folder / HOOKS_FILE, folder / MCP_FILE
    hooks_data, hooks_text = json_file.read_object(hooks_path)
    mcp_data, mcp_text = json_file.read_object(mcp_path)
    base = hooks_data if hooks_text is not None else {"version": HOOKS_VERSION}
    new_hooks = json_file.add_hook_specs(base, hook_specs(registration), hooks_path, drop=registration.dropped_markers)
    new_mcp = json_file.add_mcp_server(mcp_data, registration.mcp_server, server_entry(registration), mcp_path,
                                       f"copilot mcp remove {MCP_SERVER_NAME}, or edit {mcp_path}")
    changes = (json_file.plan_change(hooks_path, hooks_data, hooks_text, new_hooks),
               json_file.plan_change(mcp_path, mcp_data, mcp_text, new_mcp))
    if not dry_run:
        hooks_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        changes = tuple(json_file.apply_change(c) for c in changes)
    return ChangeReport("install", dry_run, changes, TITLE)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None,
              copilot_dir: Path | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; a missing file is not created."""
    folder = copilot_dir or copilot_config_dir(env)
    hooks_path, mcp_path = folder / HOOKS_FILE, folder / MCP_FILE
    hooks_data, hooks_text = json_file.read_object(hooks_path)
    mcp_data, mcp_text = json_file.read_object(mcp_path)
    changes: list[FileChange] = []
    if hooks_text is not None:
        after = json_file.remove_hooks(hooks_data, hooks_path)
        change = json_file.plan_change(hooks_path, hooks_data, hooks_text, after)
        if change.changed and not after.get("hooks") and set(after) <= {"version", "hooks"}:
            # Engram's own file, now holding no hook of anyone's: removed, not rewritten first (nor backed up)
            change = dataclasses.replace(change, after_text="", removed=True)
        changes.append(change)
    if mcp_text is not None:
        after = json_file.remove_mcp_server(mcp_data, mcp_path)
        # A file install created (nothing else in it) goes; one restored byte for byte loses its backups.
        changes.append(json_file.plan_removal(json_file.plan_change(mcp_path, mcp_data, mcp_text, after)))
    if not dry_run:
        changes = [json_file.restore_check(json_file.apply_change(c)) for c in changes]
        _remove_if_empty(hooks_path.parent)
    return ChangeReport("uninstall", dry_run, tuple(changes), TITLE)


def _remove_if_empty(folder: Path) -> None:
    """The hooks folder, once Engram's file is gone and nothing else (not even a backup) is in it."""
    with contextlib.suppress(OSError):  # not empty, or not there
        folder.rmdir()


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of the Copilot CLI: Engram's hooks file, hooks not switched off, the MCP server."""
    return [_check(settings.copilot_dir or copilot_config_dir(env), env)]


def _check(folder: Path, env: Mapping[str, str]) -> Check:
    if not on_this_machine([folder], COMMAND, env):
        return passed(TITLE, f"not installed here ({shown_path(folder, env)} does not exist); nothing to check")
    hooks_path = folder / HOOKS_FILE
    hooks = json_file.read_registered(TITLE, hooks_path, env, absent="Engram's hooks are not registered", fix=FIX,
                                      unusable="Copilot cannot read Engram's hooks in it",
                                      unusable_fix=f"move {shown_path(hooks_path, env)} aside, then {FIX}")
    if isinstance(hooks, Check):
        return hooks
    try:
        settings_data, _ = json_file.read_object(folder / SETTINGS_FILE)
        mcp, _ = json_file.read_object(folder / MCP_FILE)
    except InstallError as exc:
        return error(TITLE, f"{exc}; Copilot cannot read it either", f"fix the file (or move it aside), then {FIX}")
    if settings_data.get("disableAllHooks") is True:
        return error(TITLE, f"hooks are switched off in {shown_path(folder / SETTINGS_FILE, env)} "
                            "(disableAllHooks): Engram's are never run", "remove disableAllHooks from that file")
    specs = [spec for spec, required in hook_specs(EVENTS_AND_MARKERS) if required]
    return registered(TITLE, specs, hooks, hooks_path, mcp, folder / MCP_FILE, env, FIX)
