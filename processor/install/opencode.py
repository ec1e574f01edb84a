"""Register Engram with opencode: its plugin in ``~/.config/opencode/plugin/engram.js`` and the MCP server in
``~/.config/opencode/opencode.json`` (``$XDG_CONFIG_HOME/opencode`` when that is set).

opencode has no command hooks: it loads JavaScript plugins in-process. Engram's (``opencode_plugin.js``, written
by ``shipped_file`` with this registration's commands) runs the same hook scripts as every agent, named for
opencode by an argument after the script (``… pretooluse.py opencode``), at opencode's moments:

- a session's first prompt (``chat.message``): ``recall_hook/session_start.py opencode`` — the digest, a
  synthetic part of the prompt's message (so in the first model request, the title request included);
- after each tool call that returned (``tool.execute.after``): ``recall_hook/pretooluse.py opencode`` — the
  bites of the user's message, what earlier sessions left about the file or command, and, after a shell command
  that exited non-zero, what fixed the same failure; appended to the call's result (opencode lets a plugin change
  only a call's arguments before it runs, so a call's lessons are told right after it);
- a tool that threw (no ``tool.execute.after``; seen in ``experimental.chat.messages.transform``):
  ``recall_hook/tool_failure.py opencode`` — what fixed the same failure, appended to the error the model reads;
- optionally, each prompt (``engram install --prompt-submit``): ``recall_hook/prompt_submit.py opencode``;
- MCP server ``engram`` in opencode.json's ``mcp``: ``{"type": "local", "command": [<engram's python>, "-I",
  "-m", "mcp_tools.bridge"]}``; opencode's model sees ``engram_memory_recall``, …

opencode installs ``@opencode-ai/plugin`` from npm into its config folder at every start until that folder's
``package-lock.json`` lists it, and when a plugin is loaded it waits for that install (79 s offline). Engram's
plugin needs no package, so where the folder has no ``package.json`` and no ``package-lock.json`` install writes
both (naming the package, as opencode checks) and an empty ``node_modules/``; uninstall removes them while they
are still exactly what it wrote. opencode.json is edited as every agent's JSON settings are (``json_file``:
Engram's entry only, every other byte kept, a backup first, an atomic write; uninstall removes a file install
created, and the config folder when nothing else is left in it); opencode also reads ``opencode.jsonc`` (JSON with
comments), which Engram does not edit: such a file alone is an error naming the fix.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from processor.check import Check, error, passed, shown_path
from processor.config import AGENT_NAMES, Settings
from processor.install import json_file
from processor.install.json_file import ChangeReport, FileChange
from processor.install.registration import (
    EVENTS_AND_MARKERS,
    MCP_SERVER_MARKERS,
    MCP_SERVER_NAME,
    PRETOOLUSE,
    PROMPT_SUBMIT,
    SESSION_START,
    TOOL_FAILURE,
    HookSpec,
    InstallError,
    Registration,
    missing_programs,
    on_this_machine,
)
from processor.install.shipped_file import PluginHooks, ShippedFile, remove_empty_folders

NAME = "opencode"
TITLE = AGENT_NAMES[NAME]
COMMAND = "opencode"  # on PATH when opencode is installed
CONFIG_FILE = "opencode.json"
COMMENTED_CONFIG = "opencode.jsonc"
PLUGIN_FILE = Path("plugin") / "engram.js"
FIX = "engram install --agent opencode"
# What opencode's npm step checks before it installs its plugin package: names, not versions.
PLUGIN_PACKAGE = "@opencode-ai/plugin"
PACKAGE_JSON = '{"dependencies": {"@opencode-ai/plugin": "*"}}\n'
PACKAGE_LOCK = '{"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}\n'
# The plugin's names for its hooks, the opencode event each serves, and the hook script it runs.
PLUGIN_HOOKS = PluginHooks(NAME, (("sessionStart", "chat.message", SESSION_START),
                                  ("afterTool", "tool.execute.after", PRETOOLUSE),
                                  ("toolError", "experimental.chat.messages.transform", TOOL_FAILURE)),
                           ("prompt", "chat.message", PROMPT_SUBMIT))


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """opencode's config folder, as opencode finds it: $XDG_CONFIG_HOME/opencode, else ~/.config/opencode."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME")
    return (Path(base) if base else Path(env.get("HOME") or Path.home()) / ".config") / "opencode"


def found(env: Mapping[str, str] | None = None) -> bool:
    """opencode is here: its config folder exists, or `opencode` is on PATH."""
    env = os.environ if env is None else env
    return on_this_machine([config_dir(env)], COMMAND, env)


def hook_specs(registration: Registration) -> list[tuple[HookSpec, bool]]:
    """(hook, required), under the opencode events the plugin runs them at; the prompt hook only when asked for."""
    return PLUGIN_HOOKS.specs(registration)


def plugin(folder: Path) -> ShippedFile:
    return ShippedFile("opencode_plugin.js", folder / PLUGIN_FILE)


def server_entry(registration: Registration) -> dict[str, Any]:
    server = registration.mcp_server
    return {"type": "local", "command": [server.command, *server.args], "enabled": True}


def is_engram_server(entry: object) -> bool:
    command = entry.get("command") if isinstance(entry, dict) else None
    return isinstance(command, list) and any(isinstance(part, str) and any(m in part for m in MCP_SERVER_MARKERS)
                                             for part in command)


def _read_config(folder: Path) -> tuple[Path, dict[str, Any], str | None]:
    path = folder / CONFIG_FILE
    if not path.exists() and (folder / COMMENTED_CONFIG).exists():
        raise InstallError(f"{folder / COMMENTED_CONFIG}: opencode reads it as JSON with comments, and Engram edits "
                           f"plain JSON only; add Engram's MCP server to it by hand (`{FIX} --print` shows it) or "
                           "rename it opencode.json if it has no comments; nothing was changed")
    data, text = json_file.read_object(path)
    return path, data, text


def _with_server(data: dict[str, Any], entry: dict[str, Any], path: Path) -> dict[str, Any]:
    result = copy.deepcopy(data)
    servers = result.get("mcp")
    if servers is None:
        servers = result["mcp"] = {}
    if not isinstance(servers, dict):
        raise InstallError(f'{path}: "mcp" is a {type(servers).__name__}, expected an object; fix the file')
    existing = servers.get(MCP_SERVER_NAME)
    if existing is not None and not is_engram_server(existing):
        raise InstallError(f"{path}: an MCP server named {MCP_SERVER_NAME!r} is already configured and is not "
                           "Engram's; rename or remove it (opencode.json's mcp.engram), then retry")
    if existing != entry:
        servers[MCP_SERVER_NAME] = entry
    return result


def _without_server(data: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(data)
    servers = result.get("mcp")
    if isinstance(servers, dict) and is_engram_server(servers.get(MCP_SERVER_NAME)):
        del servers[MCP_SERVER_NAME]
        if not servers:
            del result["mcp"]
    return result


def _preseed(folder: Path) -> list[tuple[Path, str | None]]:
    """What install writes so that opencode does not install its plugin package first: (file, text; None: a
    folder), only where the folder has neither package.json nor package-lock.json."""
    if (folder / "package.json").exists() or (folder / "package-lock.json").exists():
        return []
    return [(folder / "package.json", PACKAGE_JSON), (folder / "package-lock.json", PACKAGE_LOCK),
            (folder / "node_modules", None)]


def install(registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
            folder: Path | None = None,
            **options: object,  # the other agents' options (the Codex CLI's `trust`): nothing to do here
            ) -> ChangeReport:
    """Write Engram's plugin and register its MCP server in opencode's config folder (`folder`, default from
    `env`)."""
    folder = folder or config_dir(env)
    path, data, text = _read_config(folder)
    shipped = plugin(folder)
    after = _with_server(data, server_entry(registration), path)
    change = json_file.plan_change(path, data, text, after)
    plugin_change = shipped.plan(PLUGIN_HOOKS.config(registration, shipped.config()))
    seeded = _preseed(folder)
    notes = ()
    if seeded:
        notes = (f"{folder}: package.json, package-lock.json and node_modules/ written so that opencode does not "
                 f"install {PLUGIN_PACKAGE} from npm before loading Engram's plugin (it needs none); "
                 "uninstall removes them while they are as written.",)
    if not dry_run:
        change = json_file.apply_change(change)
        plugin_change = shipped.apply(plugin_change)
        for target, content in seeded:
            if content is None:
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.write_text(content, encoding="utf-8")
    return ChangeReport("install", dry_run, (change, plugin_change), TITLE, notes=notes)


def uninstall(*, dry_run: bool = False, env: Mapping[str, str] | None = None, folder: Path | None = None
              ) -> ChangeReport:
    """Remove exactly Engram's plugin, MCP server and what install wrote for opencode's npm step."""
    folder = folder or config_dir(env)
    path, data, text = _read_config(folder)
    shipped = plugin(folder)
    changes: list[FileChange] = []
    if text is not None:
        # A file install created (nothing else in it) goes; one restored byte for byte loses its backups.
        changes.append(json_file.plan_removal(json_file.plan_change(path, data, text, _without_server(data))))
    if shipped.current() is not None:
        changes.append(shipped.plan(None))
    seeded = [(folder / "package.json", PACKAGE_JSON), (folder / "package-lock.json", PACKAGE_LOCK)]
    removed = [target for target, content in seeded if _holds(target, content)]
    modules = folder / "node_modules"
    if len(removed) == len(seeded) and modules.is_dir() and not any(modules.iterdir()):
        removed.append(modules)
    if not dry_run:
        changes = [shipped.apply(c) if c.path == shipped.path else json_file.restore_check(json_file.apply_change(c))
                   for c in changes]
        for target in removed:
            if target.is_dir():
                target.rmdir()
            else:
                target.unlink(missing_ok=True)
        # The config folder install made (and ~/.config with it), when nothing else is in it: opencode is then
        # not found here, as before.
        env = os.environ if env is None else env
        remove_empty_folders([folder, *([folder.parent] if not env.get("XDG_CONFIG_HOME") and
                                        folder == config_dir(env) else [])])
    notes = tuple(f"{target}: removed (install wrote it for opencode's npm step)" for target in removed)
    return ChangeReport("uninstall", dry_run, tuple(changes), TITLE, notes=notes)


def _holds(path: Path, content: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == content
    except (OSError, UnicodeDecodeError):
        return False


# ---------------------------------------------------------------- what doctor finds wrong


def problems(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """Doctor's check of opencode: Engram's plugin in its config folder, and its MCP server in opencode.json."""
    return [_check(config_dir(env), env)]


def _check(folder: Path, env: Mapping[str, str]) -> Check:
    name = "opencode"
    if not on_this_machine([folder], COMMAND, env):
        return passed(name, f"not installed here ({shown_path(folder, env)} does not exist); nothing to check")
    shipped = plugin(folder)
    wrong = shipped.check(name, env, FIX)
    if wrong is not None:
        return wrong
    try:
        path, data, _ = _read_config(folder)
    except InstallError as exc:
        return error(name, str(exc).split("; nothing")[0], f"fix the file, then {FIX}")
    servers = data.get("mcp") if isinstance(data.get("mcp"), dict) else {}
    server = servers.get(MCP_SERVER_NAME)
    if not is_engram_server(server):
        return error(name, f"no engram MCP server in {shown_path(path, env)}", FIX)
    gone = missing_programs([str(server["command"][0])])
    if gone:
        return error(name, f"the engram MCP server needs {shown_path(Path(gone[0]), env)}, which is gone", FIX)
    events = ", ".join(spec.event for spec, required in hook_specs(EVENTS_AND_MARKERS) if required)
    return passed(name, f"plugin {shown_path(shipped.path, env)} ({events}) and MCP server engram in "
                        f"{shown_path(path, env)}")
