"""Register Engram with the Gemini CLI: hooks and the MCP server in ``~/.gemini/settings.json``
(``$GEMINI_CLI_HOME/.gemini`` when that is set).

What gets registered (the same hook scripts as Claude Code's, named for Gemini by an argument after the
script, so the bites and the digest name the tools as Gemini shows them: ``mcp_engram_memory_expand``):

- ``SessionStart``: ``recall_hook/session_start.py gemini`` — the digest; Gemini prepends a SessionStart
  hook's ``additionalContext`` to the first prompt (headless) or adds it as the first turn (interactive);
- ``AfterTool`` (matcher ``.*``): ``recall_hook/pretooluse.py gemini`` — the bites of the user's message and
  what earlier sessions left about the file or command; Gemini drops a ``BeforeTool`` hook's context and
  appends an ``AfterTool`` one to the call's result (not to a failed call's error), so that is where it goes;
- optionally ``BeforeAgent`` (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py gemini``;
- MCP server ``engram`` in ``mcpServers``: ``<engram's python> -I -m mcp_tools.bridge``.

Hook timeouts are in milliseconds here (Gemini's unit). The file is edited as ``json_file`` edits any agent's
settings: Engram's entries only, a backup first, an atomic write, every other byte kept; uninstall removes exactly
what install added. Gemini reads its settings.json with ``//`` and ``/* */`` comments (strip-json-comments, no
trailing commas), and so does Engram: they stay where they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, error, passed, shown_path
from processor.config import AGENT_NAMES, Settings, gemini_config_dir
from processor.install import json_file
from processor.install.json_file import ChangeReport
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    MCP_SERVER_NAME,
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    HookScript,
    HookSpec,
    Registration,
    gone_in,
    missing_programs,
    on_this_machine,
)

NAME = "gemini"
TITLE = AGENT_NAMES[NAME]
COMMAND = "gemini"  # on PATH when the Gemini CLI is installed
SETTINGS_FILE = "settings.json"
MILLISECONDS = 1000  # a second in Gemini's unit of hook timeouts
FIX = "engram install --agent gemini"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return gemini_config_dir(env) / SETTINGS_FILE


def found(env: Mapping[str, str] | None = None) -> bool:
    """The Gemini CLI is here: its folder ($GEMINI_CLI_HOME/.gemini, ~/.gemini) exists, or `gemini` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([gemini_config_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), each with the name Gemini shows; the prompt hook only when asked for."""
    def spec(event: str, script: HookScript, name: str, matcher: str | None = None) -> HookSpec:
        return registration.hook_spec(event, script, NAME, matcher=matcher, name=name, timeout_unit=MILLISECONDS)

    return [
        (spec("SessionStart", SESSION_START, "engram-digest"), True),
        (spec("AfterTool", PRETOOLUSE, "engram-recall", matcher=".*"), True),
        *registration.with_prompt_hook(spec("BeforeAgent", PROMPT_SUBMIT, "engram-prompt")),
    ]


def server_entry(registration: Registration) -> dict[str, Any]:
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args)}


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            path: Path | None = None,
            **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
            ) -> ChangeReport:
    """Register Engram's hooks and MCP server in the Gemini CLI's settings.json (`path`, default from `env`)."""
    path = path or settings_path(env)
    data, text = json_file.read_object(path, comments=True)
    after = json_file.add_hook_specs(data, hook_specs(registration), path, drop=registration.dropped_markers)
    after = json_file.add_mcp_server(after, registration.mcp_server, server_entry(registration), path,
                                     f"gemini mcp remove {MCP_SERVER_NAME}")
    change = json_file.plan_change(path, data, text, after)
    if not dry_run:
        change = json_file.apply_change(change)
    return ChangeReport("install", dry_run, (change,), TITLE)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None, path: Path | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; a missing file is not created."""
    path = path or settings_path(env)
    data, text = json_file.read_object(path, comments=True)
    if text is None:
        return ChangeReport("uninstall", dry_run, (), TITLE)
    after = json_file.remove_mcp_server(json_file.remove_hooks(data, path), path)
    change = json_file.plan_removal(json_file.plan_change(path, data, text, after))
    if not dry_run:
        change = json_file.restore_check(json_file.apply_change(change))
    return ChangeReport("uninstall", dry_run, (change,), TITLE)


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of the Gemini CLI: Engram's hooks and MCP server in its settings.json."""
    return [_check(settings.gemini_dir / SETTINGS_FILE if settings.gemini_dir else settings_path(env), env)]


def _check(path: Path, env: Mapping[str, str]) -> Check:
    name = "Gemini CLI"
    if not on_this_machine([path.parent], COMMAND, env):
        return passed(name, f"not installed here ({shown_path(path.parent, env)} does not exist); nothing to check")
    shown = shown_path(path, env)
    data = json_file.read_registered(name, path, env, absent="Engram's hooks are not registered", fix=FIX,
                                     unusable="the Gemini CLI cannot read its settings either",
                                     unusable_fix=f"fix {shown} (or move it aside), then {FIX}", comments=True)
    if isinstance(data, Check):
        return data
    # The events and markers come from the same hook specs install registers.
    specs = [spec for spec, required in hook_specs(EVENTS_AND_MARKERS) if required]
    missing = [spec.event for spec in specs if not json_file.engram_commands(data, spec)]
    if missing:
        return error(name, f"{', '.join(missing)} not registered in {shown}", FIX)
    gone = gone_in(command for spec in specs for command in json_file.engram_commands(data, spec))
    server = json_file.engram_mcp_server(data)
    if server is None:
        return error(name, f"no engram MCP server in {shown}", FIX)
    gone += missing_programs([str(server.get("command", ""))])
    if gone:
        return error(name, f"Engram's entries need {shown_path(Path(gone[0]), env)}, which is gone", FIX)
    return passed(name, f"{', '.join(spec.event for spec in specs)} and MCP server engram registered in {shown}")
