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

Hook timeouts are in milliseconds here (Gemini's unit). The file is edited like Claude Code's settings
(``claude.py``): Engram's entries only, a backup first, an atomic write, the
indentation kept; uninstall removes exactly what install added. Gemini also reads JSON with comments; Engram
edits plain JSON only, so a commented file is an error that says so and names the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.config import gemini_config_dir
from processor.install.claude import (
    MCP_SERVER_NAME,
    PROMPT_SUBMIT_MARKER,
    ChangeReport,
    HookSpec,
    Registration,
    add_hook_specs,
    add_mcp_server,
    apply_change,
    check_registration,
    default_registration,
    plan_change,
    read_object,
    remove_hooks,
    remove_mcp_server,
)
from recall_hook.pretooluse import LAUNCHER
from recall_hook.prompt_submit import LAUNCHER as PROMPT_SUBMIT_LAUNCHER
from recall_hook.session_start import LAUNCHER as SESSION_START_LAUNCHER

AGENT = "gemini"
SETTINGS_FILE = "settings.json"
COMMENTS_HINT = ("the Gemini CLI reads settings.json with comments, Engram edits plain JSON only: remove the "
                 "comments, or add Engram's entries by hand (`engram install --agent gemini --print` shows them)")


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return gemini_config_dir(env) / SETTINGS_FILE


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), timeouts in milliseconds; the prompt hook only when asked for."""
    specs = [
        (HookSpec("SessionStart", registration.hook_command("session_start.py", SESSION_START_LAUNCHER, AGENT),
                  registration.session_start_timeout * 1000, registration.hook("SessionStart").markers,
                  name="engram-digest"), True),
        (HookSpec("AfterTool", registration.hook_command("pretooluse.py", LAUNCHER, AGENT),
                  registration.pretooluse_timeout * 1000, registration.hook("PreToolUse").markers, matcher=".*",
                  name="engram-recall"), True),
    ]
    prompt = HookSpec("BeforeAgent", registration.hook_command("prompt_submit.py", PROMPT_SUBMIT_LAUNCHER, AGENT),
                      registration.prompt_submit_timeout * 1000, (PROMPT_SUBMIT_MARKER,), name="engram-prompt")
    if registration.prompt_submit is not False:
        specs.append((prompt, bool(registration.prompt_submit)))
    return specs


def server_entry(registration: Registration) -> dict[str, Any]:
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args)}


def install(path: Path | None = None, registration: Registration | None = None, *, dry_run: bool = False,
            check: bool = True, env: Mapping[str, str] | None = None) -> ChangeReport:
    """Register Engram's hooks and MCP server in the Gemini CLI's settings.json."""
    path = path or settings_path(env)
    registration = registration or default_registration()
    if check:
        check_registration(registration)
    data, text = read_object(path, hint=_hint(path))
    drop = (PROMPT_SUBMIT_MARKER,) if registration.prompt_submit is False else ()
    after = add_hook_specs(data, hook_specs(registration), path, drop=drop)
    after = add_mcp_server(after, registration.mcp_server, path, server_entry(registration),
                           remove_hint=f"gemini mcp remove {MCP_SERVER_NAME}")
    change = plan_change(path, data, text, after, "hooks")
    shown_server = plan_change(path, data, text, after, "mcpServers", MCP_SERVER_NAME)
    change = dataclasses.replace(change, shown_before=change.shown_before + shown_server.shown_before,
                                 shown_after=change.shown_after + shown_server.shown_after)
    if not dry_run:
        change = apply_change(change)
    return ChangeReport("install", dry_run, (change,), agent="Gemini CLI")


def uninstall(path: Path | None = None, *, dry_run: bool = False,
              env: Mapping[str, str] | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; a missing file is not created."""
    path = path or settings_path(env)
    data, text = read_object(path, hint=_hint(path))
    if text is None:
        return ChangeReport("uninstall", dry_run, (), agent="Gemini CLI")
    after = remove_mcp_server(remove_hooks(data, path), path)
    change = plan_change(path, data, text, after, "hooks")
    if not dry_run:
        change = apply_change(change)
    return ChangeReport("uninstall", dry_run, (change,), agent="Gemini CLI")


def _hint(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return COMMENTS_HINT if "//" in text or "/*" in text else None
