"""Register Engram with the Codex CLI: its hooks in ``$CODEX_HOME/hooks.json``, their trust and the MCP server in
``$CODEX_HOME/config.toml`` (``$CODEX_HOME`` defaults to ``~/.codex``).

What gets registered (the same hook scripts as Claude Code's, named for Codex by an argument after the
script, so the bites and the digest name the tools as Codex shows them):

- ``SessionStart`` (every source): ``recall_hook/session_start.py codex`` — the digest; Codex hands a hook's
  ``additionalContext`` to the model as a developer message;
- ``PreToolUse`` (matcher ``*``): ``recall_hook/pretooluse.py codex`` — the bites of the user's message at
  its first tool call, and what earlier sessions left about the file or command (Codex's hooks name a shell
  call ``Bash`` with ``{"command"}``, as Claude Code does);
- ``PostToolUse`` (matcher ``Bash``): ``recall_hook/tool_failure.py codex`` — right after a shell command
  failed, what fixed the same failure in an earlier session (the exit status read from the rollout);
- optionally ``UserPromptSubmit`` (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py codex``;
- MCP server ``engram``: ``<engram's python> -I -m mcp_tools.bridge``, with ``env_vars`` naming the variables
  that locate Engram's data (Codex passes a server only the variables it is told to);
- the trust of those hooks (``codex_trust.py``): Codex skips an untrusted hook silently, and
  installing Engram is the user's consent to run Engram's hooks, so install records it (``--no-trust`` leaves
  it to the user: ``/hooks`` in Codex). Nothing else's trust is touched.

hooks.json is edited as ``json_file`` edits any agent's settings (Engram's entries only, other keys and their
order kept, a backup first, an atomic write); config.toml keeps the user's formatting and comments
(``codex_config.py``). Both files are read before either is written: an invalid one is an error naming the file
and the fix, and nothing is written. Uninstall removes exactly what install added.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, error, passed, shown_path
from processor.config import AGENT_NAMES, Settings, codex_config_dir
from processor.install import json_file
from processor.install.codex_config import created_by_engram, read_config, with_engram, without_engram
from processor.install.codex_trust import EngramHook, engram_hooks, untrusted
from processor.install.json_file import ChangeReport, FileChange
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    MCP_SERVER_NAME,
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    TOOL_FAILURE,
    HookScript,
    HookSpec,
    InstallError,
    Registration,
    gone_in,
    is_engram_mcp_server,
    missing_programs,
    on_this_machine,
)

NAME = "codex"
TITLE = AGENT_NAMES[NAME]
COMMAND = "codex"  # on PATH when the Codex CLI is installed
HOOKS_FILE = "hooks.json"
CONFIG_FILE = "config.toml"
# What locates Engram's data: passed on to the MCP server (Codex gives a server only the variables named).
ENV_VARS = ("ENGRAM_HOME", "XDG_DATA_HOME")
FIX = "engram install --agent codex"


def found(env: Mapping[str, str] | None = None) -> bool:
    """The Codex CLI is here: its home ($CODEX_HOME, ~/.codex) exists, or `codex` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([codex_config_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required): the prompt hook only when asked for (refreshed where present when not said)."""
    def spec(event: str, script: HookScript, matcher: str | None = None) -> HookSpec:
        return registration.hook_spec(event, script, NAME, matcher=matcher)

    return [
        (spec("SessionStart", SESSION_START), True),
        (spec("PreToolUse", PRETOOLUSE, matcher="*"), True),
        # Codex has no event for a failed call alone: the hook reads the failure from the rollout.
        (spec("PostToolUse", TOOL_FAILURE, matcher="Bash"), True),
        *registration.with_prompt_hook(spec("UserPromptSubmit", PROMPT_SUBMIT)),
    ]


def server_entry(registration: Registration) -> dict[str, Any]:
    """Engram's ``[mcp_servers.engram]``."""
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args), "env_vars": list(ENV_VARS)}


def _config_change(path: Path, before: str | None, before_data: dict[str, Any], after: str) -> FileChange:
    """config.toml's change: its diff shows the TOML lines written (redacted, as every settings file's diff)."""
    after_data = tomllib.loads(after) if after else {}
    unchanged = before is not None and before == after
    return FileChange(path, before_data, before, before_data if unchanged else after_data, after)


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            codex_dir: Path | None = None, trust: bool = True,
            **options: object,  # the other agents' options: none means anything here
            ) -> ChangeReport:
    """Register Engram's hooks, their trust (unless not `trust`) and its MCP server with the Codex CLI in
    `codex_dir` (default: $CODEX_HOME, ~/.codex)."""
    codex_dir = codex_dir or codex_config_dir(env)
    hooks_path, config_path = codex_dir / HOOKS_FILE, codex_dir / CONFIG_FILE
    hooks_data, hooks_text = json_file.read_object(hooks_path)
    config = read_config(config_path)
    before_hooks = engram_hooks(hooks_data, hooks_path)
    new_hooks = json_file.add_hook_specs(hooks_data, hook_specs(registration), hooks_path,
                                         drop=registration.dropped_markers)
    mine = engram_hooks(new_hooks, hooks_path)
    keys = {hook.key for hook in before_hooks + mine}
    trusted = {hook.key: hook.hash for hook in mine} if trust else {}
    config_after = with_engram(config.text, server_entry(registration), trusted, keys, config_path)
    changes = (json_file.plan_change(hooks_path, hooks_data, hooks_text, new_hooks),
               _config_change(config_path, config.text, config.data, config_after))
    if not dry_run:
        changes = tuple(json_file.apply_change(c) for c in changes)
    return ChangeReport("install", dry_run, changes, TITLE, notes=_trust_notes(mine, trust))


def _trust_notes(hooks: list[EngramHook], trust: bool) -> tuple[str, ...]:
    if trust:
        return (f"Codex runs a hook only once it is trusted: the trust of Engram's {len(hooks)} hooks is recorded "
                f"in {CONFIG_FILE} ([hooks.state]); `engram uninstall --agent codex` removes it with them.",)
    return (f"Codex skips untrusted hooks without a word: trust Engram's {len(hooks)} hooks in Codex (type /hooks), "
            "or run `engram install --agent codex` without --no-trust.",)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None,
              codex_dir: Path | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks, their trust and its MCP server; a missing file is not created."""
    codex_dir = codex_dir or codex_config_dir(env)
    hooks_path, config_path = codex_dir / HOOKS_FILE, codex_dir / CONFIG_FILE
    hooks_data, hooks_text = json_file.read_object(hooks_path)
    config = read_config(config_path)
    keys = {hook.key for hook in engram_hooks(hooks_data, hooks_path)}
    changes: list[FileChange] = []
    if hooks_text is not None:
        after_hooks = json_file.remove_hooks(hooks_data, hooks_path)
        # A hooks.json install created goes when it holds nothing else; one that was there comes back as it was.
        changes.append(json_file.plan_removal(json_file.plan_change(hooks_path, hooks_data, hooks_text,
                                                                    after_hooks)))
    if config.text is not None:
        change = _config_change(config_path, config.text, config.data, without_engram(config.text, keys))
        if created_by_engram(config.text):  # install made it, and nothing else was put in it since
            change = dataclasses.replace(change, after_text="", removed=True)
        changes.append(change)
    if not dry_run:
        changes = [json_file.restore_check(json_file.apply_change(c)) for c in changes]
    return ChangeReport("uninstall", dry_run, tuple(changes), TITLE)


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of the Codex CLI: Engram's hooks in hooks.json, trusted in config.toml, and its MCP server
    there."""
    return [_check(settings.codex_dir or Path(env.get("HOME", "~")) / ".codex", env)]


def _check(folder: Path, env: Mapping[str, str]) -> Check:
    name = "Codex CLI"
    if not on_this_machine([folder], COMMAND, env):
        return passed(name, f"not installed here ({shown_path(folder, env)} does not exist); nothing to check")
    try:
        hooks_file, _ = json_file.read_object(folder / HOOKS_FILE)
        config = read_config(folder / CONFIG_FILE).data
    except InstallError as exc:
        said = str(exc) if "Codex cannot read it" in str(exc) else f"{exc}; Codex cannot read it either"
        return error(name, said, f"fix the file (or move it aside), then {FIX}")
    # The events and markers come from the same hook specs install registers.
    specs = [spec for spec, required in hook_specs(EVENTS_AND_MARKERS) if required]
    missing = [spec.event for spec in specs if not json_file.engram_commands(hooks_file, spec)]
    if missing:
        return error(name, f"{', '.join(missing)} not registered in {shown_path(folder / HOOKS_FILE, env)}", FIX)
    gone = gone_in(command for spec in specs for command in json_file.engram_commands(hooks_file, spec))
    if gone:
        return error(name, f"Engram's hooks need {shown_path(Path(gone[0]), env)}, which is gone", FIX)
    skipped = untrusted(config, engram_hooks(hooks_file, folder / HOOKS_FILE))
    if skipped:
        return error(name, f"Codex skips Engram's {', '.join(h.event for h in skipped)} hook(s) without a word: "
                     f"not trusted (or trusted before they changed) in {shown_path(folder / CONFIG_FILE, env)}",
                     f"{FIX} (records their trust), or trust them in Codex: /hooks")
    servers = config.get("mcp_servers")
    server = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    if not is_engram_mcp_server(server):
        return error(name, f"no engram MCP server in {shown_path(folder / CONFIG_FILE, env)}", FIX)
    gone = missing_programs([str(server.get("command", ""))])
    if gone:
        return error(name, f"the engram MCP server needs {shown_path(Path(gone[0]), env)}, which is gone", FIX)
    events = ", ".join(spec.event for spec in specs)
    return passed(name, f"{events} registered and trusted, MCP server engram, in {shown_path(folder, env)}")
