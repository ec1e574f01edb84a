"""Register Engram with Claude Code: four hooks (a fifth on request) in settings.json, one user-scope MCP server.

What gets registered (each hook is a script of recall_hook/, see ``registration``):
- ``PreToolUse`` (matcher ``*``): ``recall_hook/pretooluse.py`` — the bites of the user's message at its first
  tool call, and what earlier sessions left about the file or command;
- ``PostToolUseFailure`` (matcher ``*``): ``recall_hook/tool_failure.py`` — what fixed the same failure in an
  earlier session, right after it;
- ``PostToolUse`` (matcher ``Task|Agent``): the same script — a sub-agent whose read was refused for the file's
  size returns rather than fails; right after it, the project's files known too big to read whole;
- ``SessionStart`` (every source): ``recall_hook/session_start.py`` — the digest;
- optionally (``Registration.prompt_submit``, ``engram install --prompt-submit``) ``UserPromptSubmit``:
  ``recall_hook/prompt_submit.py``; the hook itself stays inert unless the ``prompt_submit_enabled`` setting is
  on (see recall_hook/prompt_submit.py);
- MCP server ``engram`` (stdio): ``<engram's python> -I -m mcp_tools.bridge``.

Where:
- hooks go in ``${CLAUDE_CONFIG_DIR:-~/.claude}/settings.json`` under ``hooks``, the documented
  place for user hooks;
- the MCP server goes in the user-scope MCP table, top-level ``mcpServers`` of Claude Code's
  ``.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` if that variable is set, else
  ``~/.claude.json``), which is where ``claude mcp add --scope user`` stores it; current Claude
  Code ignores ``mcpServers`` in settings.json. The file is edited directly rather than through
  ``claude mcp add`` so that install is idempotent (``mcp add`` fails on an existing name), can
  show its change before writing, and works when ``claude`` is a shell alias rather than on PATH.

Both files are edited as ``json_file`` edits any agent's: Engram's entries only, a backup first, an atomic write.
Both are parsed before either is written, so one malformed file means nothing is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from processor.check import Check, error, passed, shown_path, warning
from processor.config import AGENT_NAMES, Settings, claude_config_dir
from processor.hook_kit.hook_io import SUB_AGENT_TOOLS
from processor.install import json_file
from processor.install.json_file import ChangeReport
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    MCP_SERVER_MODULE,
    MCP_SERVER_NAME,
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    TOOL_FAILURE,
    HookSpec,
    JsonObject,
    Registration,
    gone_in,
    is_engram_mcp_server,
    missing_programs,
    on_this_machine,
)

NAME = "claude"
TITLE = AGENT_NAMES[NAME]
COMMAND = "claude"  # on PATH when Claude Code is installed
REMOVE_SERVER = f"claude mcp remove --scope user {MCP_SERVER_NAME}"
# Claude Code's sub-agent tool (``Task``; ``Agent`` in later versions), as a hook matcher reads it: either name.
SUB_AGENT_MATCHER = "|".join(SUB_AGENT_TOOLS)


def default_settings_path(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's user settings: ``${CLAUDE_CONFIG_DIR:-~/.claude}/settings.json``."""
    return claude_config_dir(env) / "settings.json"


def default_mcp_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's own state file, which holds user-scope MCP servers."""
    env = os.environ if env is None else env
    legacy = claude_config_dir(env) / ".config.json"  # still preferred by Claude Code when present
    if legacy.is_file():
        return legacy
    base = env.get("CLAUDE_CONFIG_DIR")
    return (Path(base).expanduser() if base else Path.home()) / ".claude.json"


def found(env: Mapping[str, str] | None = None) -> bool:
    """Claude Code is here: its folder or ~/.claude.json exists, or `claude` is on PATH."""
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    folder = claude_config_dir(env) if env.get("CLAUDE_CONFIG_DIR") else os.path.join(home, ".claude")
    return on_this_machine([folder, os.path.join(home, ".claude.json")], COMMAND, env)


# ---------------------------------------------------------------- what gets registered


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required): the prompt hook only when asked for (refreshed where present when not said)."""
    spec = registration.hook_spec
    return [
        (spec("PreToolUse", PRETOOLUSE, matcher="*"), True),
        (spec("PostToolUseFailure", TOOL_FAILURE, matcher="*"), True),
        # A sub-agent whose read was refused for the file's size returns rather than fails (tool_failure.py).
        (spec("PostToolUse", TOOL_FAILURE, matcher=SUB_AGENT_MATCHER), True),
        # Stdlib only, like PreToolUse: the base interpreter with -S (see recall_hook/session_start.py).
        (spec("SessionStart", SESSION_START), True),
        *registration.with_prompt_hook(spec("UserPromptSubmit", PROMPT_SUBMIT)),
    ]


def hook(registration: Registration, event: str) -> HookSpec:
    """Claude Code's hook for `event`; the prompt hook's too, whether or not `registration` asks for it."""
    every_hook = dataclasses.replace(registration, prompt_submit=True)
    return next(spec for spec, _ in hook_specs(every_hook) if spec.event == event)


def hooks_table(registration: Registration) -> dict[str, list[JsonObject]]:
    """The ``hooks`` object as a fresh settings.json (or the plugin's hooks.json) holds it."""
    table: dict[str, list[JsonObject]] = {}
    for spec, required in hook_specs(registration):
        if required:
            table.setdefault(spec.event, []).append(spec.group())
    return table


def server_entry(registration: Registration) -> JsonObject:
    """Engram's server in ``mcpServers``: the shape `claude mcp add --scope user` writes for a stdio server."""
    server = registration.mcp_server
    return {"type": "stdio", "command": server.command, "args": list(server.args), "env": {}}


# ---------------------------------------------------------------- install and uninstall


def install(
    registration: Registration,
    *,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    settings_path: Path | None = None,
    mcp_config_path: Path | None = None,
    **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
) -> ChangeReport:
    """Register Engram's hooks in `settings_path` and its MCP server in `mcp_config_path`.

    Defaults: ``default_settings_path(env)`` and ``default_mcp_config_path(env)`` (both honour
    CLAUDE_CONFIG_DIR). Both files are parsed before either is written, so one malformed file means
    nothing is written. `dry_run` (``--print``) writes nothing and reports the change.
    """
    settings_path = settings_path or default_settings_path(env)
    mcp_config_path = mcp_config_path or default_mcp_config_path(env)
    settings, settings_text = json_file.read_object(settings_path)
    config, config_text = json_file.read_object(mcp_config_path)
    new_settings = json_file.add_hook_specs(settings, hook_specs(registration), settings_path,
                                            drop=registration.dropped_markers)
    new_config = json_file.add_mcp_server(config, registration.mcp_server, server_entry(registration),
                                          mcp_config_path, REMOVE_SERVER)
    changes = (
        json_file.plan_change(settings_path, settings, settings_text, new_settings),
        json_file.plan_change(mcp_config_path, config, config_text, new_config),
    )
    if not dry_run:
        changes = tuple(json_file.apply_change(c) for c in changes)
    return ChangeReport("install", dry_run, changes, TITLE)


def uninstall(
    *,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    settings_path: Path | None = None,
    mcp_config_path: Path | None = None,
) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; everything else in both files stays as it was."""
    settings_path = settings_path or default_settings_path(env)
    mcp_config_path = mcp_config_path or default_mcp_config_path(env)
    settings, settings_text = json_file.read_object(settings_path)
    config, config_text = json_file.read_object(mcp_config_path)
    changes = []
    # A missing file holds nothing of Engram's: it is not created.
    if settings_text is not None:
        new_settings = json_file.remove_hooks(settings, settings_path)
        changes.append(json_file.plan_change(settings_path, settings, settings_text, new_settings))
    if config_text is not None:
        new_config = json_file.remove_mcp_server(config, mcp_config_path)
        changes.append(json_file.plan_change(mcp_config_path, config, config_text, new_config))
    # A file install created goes with what it held (a later `engram install` must not find Claude Code here).
    changes = [json_file.plan_removal(c) for c in changes]
    if not dry_run:
        changes = [json_file.restore_check(json_file.apply_change(c)) for c in changes]
    return ChangeReport("uninstall", dry_run, tuple(changes), TITLE)


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's checks of Claude Code: Engram's hooks in settings.json, its MCP server in .claude.json."""
    return [
        _checked("Claude Code hooks", default_settings_path(env), env, _hooks_check,
                 absent="Engram's hooks are not installed", kept_there="settings"),
        _checked("Claude Code MCP server", default_mcp_config_path(env), env, _mcp_server_check,
                 absent="the engram MCP server is not registered", kept_there="MCP servers"),
    ]


# A check of one of Claude Code's files: (check name, the file as shown, its object, env) -> the report line.
FileCheck = Callable[[str, str, JsonObject, Mapping[str, str]], Check]


def _checked(name: str, path: Path, env: Mapping[str, str], check: FileCheck, *, absent: str,
             kept_there: str) -> Check:
    """`check` of the file at `path` as read, or why it cannot be read (`kept_there`: what Claude Code keeps there)."""
    shown = shown_path(path, env)
    data = json_file.read_registered(name, path, env, absent=absent, fix="engram install",
                                     unusable=f"Claude Code cannot read its {kept_there}",
                                     unusable_fix=f"fix the JSON in {shown} (or move it aside), then engram install")
    return data if isinstance(data, Check) else check(name, shown, data, env)


def _hooks_check(name: str, shown: str, settings: JsonObject, env: Mapping[str, str]) -> Check:
    # The events and markers come from the same hook specs install registers; the interpreters do not matter here.
    specs = [spec for spec, required in hook_specs(EVENTS_AND_MARKERS) if required]
    missing = [spec.event for spec in specs if not json_file.engram_commands(settings, spec)]
    broken = [f"{spec.event} hook needs {shown_path(Path(gone), env)}, which is gone"
              for spec in specs for gone in gone_in(json_file.engram_commands(settings, spec))]
    if missing:
        return error(name, f"{', '.join(missing)} not registered in {shown}", "engram install")
    if broken:
        return error(name, "; ".join(broken), "engram install (registers this Engram's interpreter and hook)")
    return passed(name, f"{', '.join(s.event for s in specs)} registered in {shown}")


def _mcp_server_check(name: str, shown: str, config: JsonObject, env: Mapping[str, str]) -> Check:
    servers = config.get("mcpServers")
    server = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    if server is None:
        return error(name, f"no {MCP_SERVER_NAME!r} server in {shown}", "engram install")
    if not is_engram_mcp_server(server):
        return error(name, f"the {MCP_SERVER_NAME!r} server in {shown} is not Engram's",
                     f"{REMOVE_SERVER}; engram install")
    args = server.get("args") if isinstance(server.get("args"), list) else []
    gone = missing_programs([a for a in [server.get("command"), *args] if isinstance(a, str)])
    if gone:
        return error(name, f"the engram MCP server needs {shown_path(Path(gone[0]), env)}, which is gone",
                     "engram install")
    if MCP_SERVER_MODULE not in args:
        return warning(name, f"{MCP_SERVER_NAME!r} in {shown} is an earlier Engram's registration: a server of its "
                       "own per session, which takes over a second to start",
                       "engram install (registers the bridge to the running processor)")
    return passed(name, f"{MCP_SERVER_NAME!r} registered in {shown}")
