"""An agent's JSON settings file, edited the careful way: Engram's hooks and MCP server in, or out, and nothing else.

Every agent whose settings are JSON (Claude Code's settings.json and .claude.json, the Codex CLI's hooks.json, the
Gemini CLI's settings.json) keeps its hooks in the same shape, ``{"hooks": {event: [{"matcher"?, "hooks":
[{"type": "command", "command", "timeout"}]}]}}``, and its MCP servers under ``mcpServers``. Such a file is
parsed (invalid JSON is an error naming the file, and nothing is written), only Engram's own entries are changed
(recognised by the markers in their commands), every other key keeps its place and order, the file is backed up,
a temp file in the same directory is written and ``os.replace``d, and the file's mode is kept. Installing twice
changes nothing the second time; uninstall removes exactly the entries install added (and containers that only
held them).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.check import Check, error, shown_path
from processor.files import write_atomic
from processor.install.registration import (
    HOOK_MARKERS,
    MCP_SERVER_NAME,
    HookSpec,
    InstallError,
    JsonObject,
    McpServerSpec,
    is_engram_hook,
    is_engram_mcp_server,
)

BACKUP_SUFFIX = ".engram-backup-"


class UnusableFile(InstallError):
    """A settings file that cannot be used as it is: `problem` says what is wrong with it (doctor shows that),
    the message adds what install and uninstall did about it."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


def read_object(path: Path, hint: str | None = None) -> tuple[JsonObject, str | None]:
    """A JSON settings file's object and text ({} and None when it does not exist); UnusableFile naming the file,
    the place and the fix when it cannot be used (`hint`: what else to say about it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"{path}: cannot read ({exc})"
        raise UnusableFile(problem, f"{problem}; nothing was changed") from None
    if not text.strip():
        return {}, text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})"
        raise UnusableFile(problem, f"{problem}; {hint + '; ' if hint else ''}fix or move the file aside, "
                                    "nothing was changed") from None
    if not isinstance(data, dict):
        problem = f"{path}: expected a JSON object, not a {type(data).__name__}"
        raise UnusableFile(problem, f"{problem}; nothing was changed")
    return data, text


def read_registered(name: str, path: Path, env: Mapping[str, str], *, absent: str, unusable: str,
                    fix: str, unusable_fix: str) -> JsonObject | Check:
    """For doctor's check `name`: the file's object, or the failed check that says the file does not exist (then
    `absent`) or what is wrong with it (then `unusable`: what that means to the agent)."""
    try:
        data, text = read_object(path)
    except UnusableFile as exc:
        return error(name, f"{exc.problem}; {unusable}", unusable_fix)
    if text is None:
        return error(name, f"{shown_path(path, env)} does not exist: {absent}", fix)
    return data


# ---------------------------------------------------------------- pure merges


def _object_at(data: JsonObject, key: str, path: Path) -> JsonObject | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InstallError(f'{path}: "{key}" is a {type(value).__name__}, expected an object; fix the file')
    return value


def add_hook_specs(settings: JsonObject, specs: list[tuple[HookSpec, bool]], path: Path,
                   drop: tuple[str, ...] = ()) -> JsonObject:
    """A copy of `settings` with each (spec, required) hook registered once, other hooks untouched; hooks marked
    by `drop` are removed first.

    An Engram hook already present is updated where it stands (so a matcher the user narrowed is kept);
    duplicates are dropped; a missing required one is appended as a group of its own.
    """
    result = copy.deepcopy(settings)
    if drop:
        result = remove_marked(result, path, drop)
    hooks = _object_at(result, "hooks", path)
    if hooks is None:
        hooks = result["hooks"] = {}
    for spec, required in specs:
        if not required and not isinstance(hooks.get(spec.event), list):
            continue
        groups = hooks.get(spec.event, [])
        if not isinstance(groups, list):
            raise InstallError(f"{path}: hooks.{spec.event} is not a list; fix the file")
        placed = False
        new_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_engram_hook(h, spec.markers) for h in inner):
                new_groups.append(group)
                continue
            kept = []
            for hook in inner:
                if not is_engram_hook(hook, spec.markers):
                    kept.append(hook)
                elif not placed:
                    kept.append(spec.entry())
                    placed = True
            if kept:
                new_groups.append({**group, "hooks": kept})
        if not placed and required:
            new_groups.append(spec.group())
        hooks[spec.event] = new_groups
    return result


def remove_hooks(settings: JsonObject, path: Path) -> JsonObject:
    """A copy of `settings` without Engram's hooks, and without groups/events only they filled."""
    return remove_marked(settings, path, HOOK_MARKERS)


def remove_marked(settings: JsonObject, path: Path, markers: tuple[str, ...]) -> JsonObject:
    """A copy of `settings` without the hooks whose commands hold one of `markers` (and containers only they
    filled)."""
    result = copy.deepcopy(settings)
    hooks = _object_at(result, "hooks", path)
    if not hooks:
        return result
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        changed = False
        new_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(is_engram_hook(h, markers) for h in inner):
                changed = True
                kept = [h for h in inner if not is_engram_hook(h, markers)]
                if not kept:
                    continue
                group = {**group, "hooks": kept}
            new_groups.append(group)
        if changed:
            if new_groups:
                hooks[event] = new_groups
            else:
                del hooks[event]
                if not hooks:
                    del result["hooks"]
    return result


def engram_commands(settings: JsonObject, spec: HookSpec) -> list[str]:
    """The commands of Engram's hooks registered for `spec`'s event (recognised by its markers)."""
    hooks = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    return [h["command"] for group in hooks.get(spec.event) or [] if isinstance(group, dict)
            and isinstance(group.get("hooks"), list) for h in group["hooks"] if is_engram_hook(h, spec.markers)]


def add_mcp_server(config: JsonObject, server: McpServerSpec, entry: JsonObject, path: Path,
                   remove_hint: str) -> JsonObject:
    """A copy of `config` with Engram's server in its ``mcpServers`` (`entry`: the agent's shape of it); a server
    of that name that is not Engram's is an error naming the fix (`remove_hint`: the agent's command to remove
    it)."""
    result = copy.deepcopy(config)
    servers = _object_at(result, "mcpServers", path)
    if servers is None:
        servers = result["mcpServers"] = {}
    existing = servers.get(server.name)
    if existing is not None and not is_engram_mcp_server(existing):
        raise InstallError(
            f"{path}: an MCP server named {server.name!r} is already registered and is not Engram's "
            f"({json.dumps(existing)[:200]}); remove it ({remove_hint}) and retry"
        )
    if existing != entry:
        servers[server.name] = entry
    return result


def remove_mcp_server(config: JsonObject, path: Path, name: str = MCP_SERVER_NAME) -> JsonObject:
    result = copy.deepcopy(config)
    servers = _object_at(result, "mcpServers", path)
    if servers and is_engram_mcp_server(servers.get(name)):
        del servers[name]
        if not servers:
            del result["mcpServers"]
    return result


def engram_mcp_server(config: JsonObject) -> JsonObject | None:
    """Engram's entry in ``mcpServers`` (None: none of that name, or one that is not Engram's)."""
    servers = config.get("mcpServers")
    server = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    return server if is_engram_mcp_server(server) else None


# ---------------------------------------------------------------- changes to files


@dataclass(frozen=True)
class FileChange:
    """One settings file's planned (or applied) change.

    `shown_before`/`shown_after` render only the key Engram touches, for diffs: these files can
    hold API keys and tokens elsewhere, which must never end up in a terminal or a log.
    """

    path: Path
    before: JsonObject
    before_text: str | None  # None: the file does not exist
    after: JsonObject
    after_text: str
    shown_before: str
    shown_after: str
    backup: Path | None = None
    written: bool = False

    @property
    def changed(self) -> bool:
        return self.before_text is None or self.before != self.after

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.shown_before.splitlines(keepends=True),
            self.shown_after.splitlines(keepends=True),
            fromfile=f"{self.path} (before)",
            tofile=f"{self.path} (after)",
        )
        return "".join(lines)


@dataclass(frozen=True)
class ChangeReport:
    action: str  # "install" or "uninstall"
    dry_run: bool
    changes: tuple[FileChange, ...]
    agent: str  # the agent's name, as the restart hint says it
    notes: tuple[str, ...] = ()  # what else the user must know (e.g. the Codex CLI's hook trust)

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.changes)

    def describe(self) -> str:
        """Human text for the CLI: what changed (or would), backups, and diffs of Engram's keys."""
        out = []
        for change in self.changes:
            if not change.changed:
                state = "present" if self.action == "install" else "absent"
                out.append(f"{change.path}: Engram's entries already {state}; unchanged")
                continue
            if change.before_text is None:
                verb = "would create" if self.dry_run else "created"
            else:
                verb = "would update" if self.dry_run else "updated"
            out.append(f"{change.path}: {verb}")
            if change.backup is not None:
                out.append(f"  backup: {change.backup}")
            out.append(change.diff().rstrip("\n"))
        out.extend(self.notes)
        if self.dry_run:
            out.append("(--print: nothing was written)")
        elif self.changed:
            out.append(f"Restart running {self.agent} sessions to pick up the change.")
        return "\n".join(out) + "\n"


def render_json(data: JsonObject, original: str | None) -> str:
    """JSON in the file's own indentation (default 2, as Claude Code writes) and final newline."""
    indent: str | int = 2
    if original and "\n" in original.strip():
        second = original.strip().split("\n", 1)[1]
        lead = second[: len(second) - len(second.lstrip(" \t"))]
        if lead:
            indent = lead
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    keep_bare = original is not None and original.strip() and not original.endswith("\n")
    return text if keep_bare else text + "\n"


def plan_change(
    path: Path, before: JsonObject, before_text: str | None, after: JsonObject, *keys: str
) -> FileChange:
    """The change from `before` to `after`, its diff showing only the value at `keys` (Engram's)."""
    def shown(data: JsonObject) -> str:
        value: Any = data
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return ""
        for key in reversed(keys):  # re-nest just that value: {"mcpServers": {"engram": ...}}
            value = {key: value}
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"

    unchanged = before_text is not None and before == after
    after_text = before_text if unchanged else render_json(after, before_text)
    return FileChange(path, before, before_text, after, after_text or "", shown(before), shown(after))


def _backup_path(target: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = target.with_name(f"{target.name}{BACKUP_SUFFIX}{stamp}")
    n = 1
    while candidate.exists():
        candidate = target.with_name(f"{target.name}{BACKUP_SUFFIX}{stamp}-{n}")
        n += 1
    return candidate


def apply_change(change: FileChange) -> FileChange:
    if not change.changed:
        return change
    backup = None
    if change.before_text is not None:
        target = Path(os.path.realpath(change.path))
        backup = _backup_path(target)
        shutil.copy2(target, backup)
    # Through a dotfiles symlink to its target, keeping the file's mode and owner; a new file is 0600,
    # since agents' settings files can hold credentials.
    write_atomic(change.path, change.after_text, keep_existing=True, durable=True)
    return dataclasses.replace(change, backup=backup, written=True)
