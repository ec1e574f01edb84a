"""An agent whose hooks and MCP servers sit in JSON files in Claude Code's shape: Engram's entries put in, taken
out, and checked by doctor, the same way for each such agent (Qwen Code's one settings.json; the GitHub Copilot
CLI's hooks file and MCP file). The Gemini CLI's settings.json has the same shape (``gemini.py``).

The edits themselves are ``json_file``'s (Engram's entries only, only their text written, a backup first, an
atomic write; uninstall gives an unedited file back byte for byte); what is here is the sequence every such agent
repeats: read the file, merge the hook specs and the server, write, and what doctor says of what it finds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from processor.check import Check, error, passed, shown_path
from processor.install import json_file
from processor.install.json_file import ChangeReport
from processor.install.registration import (
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    HookScript,
    HookSpec,
    JsonObject,
    Registration,
    gone_in,
    missing_programs,
)


def after_call_hooks(registration: Registration, agent: str) -> list[tuple[HookSpec, bool]]:
    """(hook, required) of an agent with Claude Code's hook events that reads a call's context only after the call
    (the Copilot CLI delivers PreToolUse's after the result, Qwen Code drops it): the digest at SessionStart, and
    the message's bites, the call's lessons and a failure's fix with the result (PostToolUse, PostToolUseFailure);
    the prompt hook only when asked for."""
    def spec(event: str, script: HookScript) -> HookSpec:
        return registration.hook_spec(event, script, agent, matcher="*")

    return [
        (spec("SessionStart", SESSION_START), True),
        (spec("PostToolUse", PRETOOLUSE), True),
        (spec("PostToolUseFailure", PRETOOLUSE), True),
        *registration.with_prompt_hook(spec("UserPromptSubmit", PROMPT_SUBMIT)),
    ]


@dataclasses.dataclass(frozen=True)
class SettingsFile:
    """One agent's JSON settings file holding both its hooks and its MCP servers."""

    path: Path
    title: str  # the agent, as the report names it
    remove_hint: str  # the agent's own way to remove an MCP server of Engram's name that is not Engram's
    comments: bool = False  # the agent reads // and /* */ comments in it (they are kept like any other byte)

    def read(self) -> tuple[JsonObject, str | None]:
        return json_file.read_object(self.path, comments=self.comments)

    def install(self, registration: Registration, specs: list[tuple[HookSpec, bool]], server: JsonObject, *,
                dry_run: bool = False) -> ChangeReport:
        """Engram's hooks (`specs`) and MCP server (`server`, the agent's entry for it) in the file."""
        data, text = self.read()
        after = json_file.add_hook_specs(data, specs, self.path, drop=registration.dropped_markers)
        after = json_file.add_mcp_server(after, registration.mcp_server, server, self.path, self.remove_hint)
        change = json_file.plan_change(self.path, data, text, after)
        if not dry_run:
            change = json_file.apply_change(change)
        return ChangeReport("install", dry_run, (change,), self.title)

    def uninstall(self, *, dry_run: bool = False) -> ChangeReport:
        """Exactly Engram's hooks and MCP server out of the file (a file install created goes, a file restored
        byte for byte loses its backups); a missing file is not created."""
        data, text = self.read()
        if text is None:
            return ChangeReport("uninstall", dry_run, (), self.title)
        after = json_file.remove_mcp_server(json_file.remove_hooks(data, self.path), self.path)
        change = json_file.plan_removal(json_file.plan_change(self.path, data, text, after))
        if not dry_run:
            change = json_file.restore_check(json_file.apply_change(change))
        return ChangeReport("uninstall", dry_run, (change,), self.title)


def registered(name: str, specs: list[HookSpec], hooks: JsonObject, hooks_path: Path, servers: JsonObject,
               servers_path: Path, env: Mapping[str, str], fix: str) -> Check:
    """Doctor's check of Engram's registration with an agent: each of `specs` in `hooks` (the content of
    `hooks_path`), its MCP server in `servers` (of `servers_path`, maybe the same file), and everything their
    commands need still there."""
    shown_hooks, shown_servers = shown_path(hooks_path, env), shown_path(servers_path, env)
    missing = [spec.event for spec in specs if not json_file.engram_commands(hooks, spec)]
    if missing:
        return error(name, f"{', '.join(missing)} not registered in {shown_hooks}", fix)
    server = json_file.engram_mcp_server(servers)
    if server is None:
        return error(name, f"no engram MCP server in {shown_servers}", fix)
    gone = gone_in(command for spec in specs for command in json_file.engram_commands(hooks, spec))
    gone += missing_programs([str(server.get("command", ""))])
    if gone:
        return error(name, f"Engram's entries need {shown_path(Path(gone[0]), env)}, which is gone", fix)
    where = shown_hooks if hooks_path == servers_path else f"{shown_hooks}, MCP server engram in {shown_servers}"
    server_said = " and MCP server engram" if hooks_path == servers_path else ""
    return passed(name, f"{', '.join(spec.event for spec in specs)}{server_said} registered in {where}")
