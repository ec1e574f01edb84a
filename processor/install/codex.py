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

hooks.json is edited like Claude Code's settings (``claude.py``: Engram's entries
only, other keys and their order kept, a backup first, an atomic write); config.toml keeps the user's
formatting and comments (``codex_config.py``). Both files are read before either is written:
an invalid one is an error naming the file and the fix, and nothing is written. Uninstall removes exactly
what install added.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.config import codex_config_dir
from processor.install.claude import (
    MCP_SERVER_NAME,
    PROMPT_SUBMIT_MARKER,
    ChangeReport,
    FileChange,
    HookSpec,
    Registration,
    add_hook_specs,
    apply_change,
    check_registration,
    default_registration,
    is_engram_mcp_server,
    plan_change,
    read_object,
    remove_hooks,
)
from processor.install.codex_config import created_by_engram, read_config, with_engram, without_engram
from processor.install.codex_trust import EngramHook, engram_hooks
from recall_hook.pretooluse import LAUNCHER
from recall_hook.prompt_submit import LAUNCHER as PROMPT_SUBMIT_LAUNCHER
from recall_hook.session_start import LAUNCHER as SESSION_START_LAUNCHER
from recall_hook.tool_failure import LAUNCHER as TOOL_FAILURE_LAUNCHER

AGENT = "codex"
HOOKS_FILE = "hooks.json"
CONFIG_FILE = "config.toml"
# What locates Engram's data: passed on to the MCP server (Codex gives a server only the variables named).
ENV_VARS = ("ENGRAM_HOME", "XDG_DATA_HOME")


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required): the prompt hook only when asked for (refreshed where present when not said)."""
    specs = [
        (HookSpec("SessionStart", registration.hook_command("session_start.py", SESSION_START_LAUNCHER, AGENT),
                  registration.session_start_timeout, registration.hook("SessionStart").markers), True),
        (HookSpec("PreToolUse", registration.hook_command("pretooluse.py", LAUNCHER, AGENT),
                  registration.pretooluse_timeout, registration.hook("PreToolUse").markers, matcher="*"), True),
        # Codex has no event for a failed call alone: the hook reads the failure from the rollout.
        (HookSpec("PostToolUse", registration.hook_command("tool_failure.py", TOOL_FAILURE_LAUNCHER, AGENT),
                  registration.tool_failure_timeout, registration.hook("PostToolUseFailure").markers,
                  matcher="Bash"), True),
    ]
    prompt = HookSpec("UserPromptSubmit", registration.hook_command("prompt_submit.py", PROMPT_SUBMIT_LAUNCHER, AGENT),
                      registration.prompt_submit_timeout, (PROMPT_SUBMIT_MARKER,))
    if registration.prompt_submit is not False:
        specs.append((prompt, bool(registration.prompt_submit)))
    return specs


def server_entry(registration: Registration) -> dict[str, Any]:
    """Engram's ``[mcp_servers.engram]``."""
    server = registration.mcp_server
    return {"command": server.command, "args": list(server.args), "env_vars": list(ENV_VARS)}


def _config_change(path: Path, before: str | None, before_data: dict[str, Any], after: str) -> FileChange:
    after_data = tomllib.loads(after) if after else {}

    def shown(data: dict[str, Any]) -> str:
        # Only Engram's keys: config.toml can hold API keys and tokens elsewhere.
        servers = data.get("mcp_servers")
        hooks = data.get("hooks")
        mine = {"mcp_servers.engram": servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None,
                "hooks.state": hooks.get("state") if isinstance(hooks, dict) else None}
        return "".join(f"{k} = {v!r}\n" for k, v in mine.items() if v)

    unchanged = before is not None and before == after
    return FileChange(path, before_data, before, before_data if unchanged else after_data, after,
                      shown(before_data), shown(after_data))


def install(codex_dir: Path | None = None, registration: Registration | None = None, *, dry_run: bool = False,
            check: bool = True, trust: bool = True, env: Mapping[str, str] | None = None) -> ChangeReport:
    """Register Engram's hooks, their trust and its MCP server with the Codex CLI in `codex_dir`."""
    codex_dir = codex_dir or codex_config_dir(env)
    hooks_path, config_path = codex_dir / HOOKS_FILE, codex_dir / CONFIG_FILE
    registration = registration or default_registration()
    if check:
        check_registration(registration)
    hooks_data, hooks_text = read_object(hooks_path)
    config = read_config(config_path)
    before_hooks = engram_hooks(hooks_data, hooks_path)
    drop = (PROMPT_SUBMIT_MARKER,) if registration.prompt_submit is False else ()
    new_hooks = add_hook_specs(hooks_data, hook_specs(registration), hooks_path, drop=drop)
    mine = engram_hooks(new_hooks, hooks_path)
    keys = {hook.key for hook in before_hooks + mine}
    trusted = {hook.key: hook.hash for hook in mine} if trust else {}
    config_after = with_engram(config.text, server_entry(registration), trusted, keys, config_path)
    changes = (plan_change(hooks_path, hooks_data, hooks_text, new_hooks, "hooks"),
               _config_change(config_path, config.text, config.data, config_after))
    if not dry_run:
        changes = tuple(apply_change(c) for c in changes)
    return ChangeReport("install", dry_run, changes, agent="Codex", notes=_trust_notes(mine, trust))


def _trust_notes(hooks: list[EngramHook], trust: bool) -> tuple[str, ...]:
    if trust:
        return (f"Codex runs a hook only once it is trusted: the trust of Engram's {len(hooks)} hooks is recorded "
                f"in {CONFIG_FILE} ([hooks.state]); `engram uninstall --agent codex` removes it with them.",)
    return (f"Codex skips untrusted hooks without a word: trust Engram's {len(hooks)} hooks in Codex (type /hooks), "
            "or run `engram install --agent codex` without --no-trust.",)


def uninstall(codex_dir: Path | None = None, *, dry_run: bool = False,
              env: Mapping[str, str] | None = None) -> ChangeReport:
    """Remove exactly Engram's hooks, their trust and its MCP server; a missing file is not created."""
    codex_dir = codex_dir or codex_config_dir(env)
    hooks_path, config_path = codex_dir / HOOKS_FILE, codex_dir / CONFIG_FILE
    hooks_data, hooks_text = read_object(hooks_path)
    config = read_config(config_path)
    keys = {hook.key for hook in engram_hooks(hooks_data, hooks_path)}
    changes: list[FileChange] = []
    removed: list[Path] = []
    if hooks_text is not None:
        after_hooks = remove_hooks(hooks_data, hooks_path)
        changes.append(plan_change(hooks_path, hooks_data, hooks_text, after_hooks, "hooks"))
        if not after_hooks and hooks_data:
            removed.append(hooks_path)  # it held only Engram's hooks: an empty hooks file means nothing to Codex
    if config.text is not None:
        changes.append(_config_change(config_path, config.text, config.data, without_engram(config.text, keys)))
        if created_by_engram(config.text):
            removed.append(config_path)  # install made it, and nothing else was put in it since
    if not dry_run:
        changes = [apply_change(c) for c in changes]
        for path in removed:
            path.unlink(missing_ok=True)
    notes = tuple(f"{path}: removed (it held nothing but Engram's entries)" for path in removed)
    return ChangeReport("uninstall", dry_run, tuple(changes), agent="Codex", notes=notes)


def registered(codex_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(hooks.json, config.toml) as Codex reads them, for doctor; InstallError when one cannot be read."""
    hooks_data, _ = read_object(codex_dir / HOOKS_FILE)
    return hooks_data, read_config(codex_dir / CONFIG_FILE).data


def engram_server(config: dict[str, Any]) -> object:
    servers = config.get("mcp_servers")
    server = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    return server if is_engram_mcp_server(server) else None
