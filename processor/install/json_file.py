"""An agent's JSON settings file, edited the careful way: Engram's hooks and MCP server in, or out, and nothing else.

Every agent whose settings are JSON (Claude Code's settings.json and .claude.json, the Codex CLI's hooks.json, the
Gemini CLI's settings.json) keeps its hooks in the same shape, ``{"hooks": {event: [{"matcher"?, "hooks":
[{"type": "command", "command", "timeout"}]}]}}``, and its MCP servers under ``mcpServers``. Such a file is
parsed (invalid JSON is an error naming the file, and nothing is written; the Gemini CLI's may hold comments),
only Engram's own entries are changed (recognised by the markers in their commands) and only their text is
written (``json_text``: every other byte — indentation, key order, comments, the final newline or its absence —
stays), the file is backed up, a temp file in the same directory is written and ``os.replace``d, and the file's
mode is kept. Installing twice changes nothing the second time; uninstall removes exactly the entries install
added (and containers that only held them), so an unedited file comes back byte for byte: its backups are then
removed, and a file install created (none was backed up) is removed with the folder it made, when nothing else
was put in them.
"""

from __future__ import annotations

import contextlib
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

from processor.check import Check, error, shown_path
from processor.files import write_atomic
from processor.install import json_text
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
from processor.redaction import redact

BACKUP_SUFFIX = ".engram-backup-"


class UnusableFile(InstallError):
    """A settings file that cannot be used as it is: `problem` says what is wrong with it (doctor shows that),
    the message adds what install and uninstall did about it."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


def read_object(path: Path, hint: str | None = None, *, comments: bool = False) -> tuple[JsonObject, str | None]:
    """A JSON settings file's object and text ({} and None when it does not exist); UnusableFile naming the file,
    the place and the fix when it cannot be used (`hint`: what else to say about it). `comments`: the agent
    reads ``//`` and ``/* */`` comments in it (the Gemini CLI)."""
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
        data = json_text.loads(text, comments)
    except json_text.JsonTextError as exc:
        problem = f"{path}: invalid JSON ({exc})"
        raise UnusableFile(problem, f"{problem}; fix or move the file aside, nothing was changed") from None
    except json.JSONDecodeError as exc:
        problem = f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})"
        raise UnusableFile(problem, f"{problem}; {hint + '; ' if hint else ''}fix or move the file aside, "
                                    "nothing was changed") from None
    if not isinstance(data, dict):
        problem = f"{path}: expected a JSON object, not a {type(data).__name__}"
        raise UnusableFile(problem, f"{problem}; nothing was changed")
    return data, text


def read_registered(name: str, path: Path, env: Mapping[str, str], *, absent: str, unusable: str,
                    fix: str, unusable_fix: str, comments: bool = False) -> JsonObject | Check:
    """For doctor's check `name`: the file's object, or the failed check that says the file does not exist (then
    `absent`) or what is wrong with it (then `unusable`: what that means to the agent)."""
    try:
        data, text = read_object(path, comments=comments)
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
    """One settings file's planned (or applied) change. Its diff shows the lines that change, redacted: these
    files can hold API keys and tokens, which must never end up in a terminal or a log."""

    path: Path
    before: JsonObject
    before_text: str | None  # None: the file does not exist
    after: JsonObject
    after_text: str
    backup: Path | None = None
    written: bool = False
    removed: bool = False  # uninstall removes the file: install created it and nothing else is in it
    restored: bool = False  # the file is back as a backup held it: its backups were removed

    @property
    def changed(self) -> bool:
        return self.before_text is None or self.before != self.after or self.removed

    def diff(self) -> str:
        """The lines that change, as written: no context lines, each redacted, and a line of the user's that only
        gains (or loses) a comma before Engram's entries is not shown, only said (these files hold API keys)."""
        old = (self.before_text or "").splitlines(keepends=True)
        new = self.after_text.splitlines(keepends=True)
        out = [f"--- {self.path if self.before_text is not None else '/dev/null'}\n",
               f"+++ {self.path if not self.removed else '/dev/null'}\n"]
        # Lines are matched without their commas: the user's line that gains one stays matched to itself.
        matcher = difflib.SequenceMatcher(None, [_uncomma(line) for line in old], [_uncomma(line) for line in new],
                                          autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                for offset in range(i2 - i1):
                    before, after = old[i1 + offset], new[j1 + offset]
                    if before.rstrip("\n") != after.rstrip("\n"):
                        gained = after.count(",") > before.count(",")
                        out.append(f"@@ line {i1 + offset + 1}: a comma {'added at' if gained else 'taken from'} "
                                   "its end @@\n")
                    elif before != after:
                        out.append(f"@@ line {i1 + offset + 1}: {'a' if after.endswith(chr(10)) else 'no'} final "
                                   "newline @@\n")
                continue
            # As diff(1) numbers them: an empty side names the line it follows.
            out.append(f"@@ -{i1 + (i2 > i1)},{i2 - i1} +{j1 + (j2 > j1)},{j2 - j1} @@\n")
            out += [_shown("-", line) for line in old[i1:i2]] + [_shown("+", line) for line in new[j1:j2]]
        return "".join(out) if len(out) > 2 else ""


def _uncomma(line: str) -> str:
    """A line as the diff matches it: without commas (adding a last member adds one to the line before)."""
    return line.replace(",", "").rstrip()


def _shown(sign: str, line: str) -> str:
    shown = str(redact(line.rstrip("\n")))
    return f"{sign}{shown}\n" if line.endswith("\n") else f"{sign}{shown}\n\\ No newline at end of file\n"


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
        out = [] if self.changes else [f"no file of {self.agent}'s here: nothing to do"]
        for change in self.changes:
            if not change.changed:
                state = "present" if self.action == "install" else "absent"
                out.append(f"{change.path}: Engram's entries already {state}; unchanged")
                continue
            if change.before_text is None:
                verb = "would create" if self.dry_run else "created"
            elif change.removed:
                verb = ("would remove" if self.dry_run else "removed") + " (Engram created it; nothing else is in it)"
            else:
                verb = "would update" if self.dry_run else "updated"
            out.append(f"{change.path}: {verb}")
            if change.restored:
                out.append("  back as it was before `engram install`: its backups are removed")
            elif change.backup is not None:
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


def plan_change(path: Path, before: JsonObject, before_text: str | None, after: JsonObject) -> FileChange:
    """The change from `before` to `after`: only what differs is rewritten in the file's text."""
    unchanged = before_text is not None and before == after
    if unchanged:
        after_text = before_text
    elif before_text is None or not before_text.strip():
        after_text = render_json(after, before_text)
    else:
        after_text = json_text.patch(before_text, before, after)
    return FileChange(path, before, before_text, after, after_text or "")


def plan_removal(change: FileChange) -> FileChange:
    """Uninstall's change, made a removal of the file when install created it (no backup of it exists, so
    there was no file) and nothing is left in it."""
    if change.before_text is None or change.after or not change.changed or backups_of(change.path):
        return change
    return dataclasses.replace(change, after_text="", removed=True)


def backups_of(path: Path) -> list[Path]:
    """Engram's backups of the file, oldest first."""
    target = Path(os.path.realpath(path))
    try:
        return sorted(p for p in target.parent.iterdir() if p.name.startswith(target.name + BACKUP_SUFFIX))
    except OSError:
        return []


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
    if change.removed:
        target = Path(os.path.realpath(change.path))
        target.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the folder install made for it, if nothing else is in it
            target.parent.rmdir()
        return dataclasses.replace(change, written=True)
    backup = None
    if change.before_text is not None:
        target = Path(os.path.realpath(change.path))
        backup = _backup_path(target)
        shutil.copy2(target, backup)
    # Through a dotfiles symlink to its target, keeping the file's mode and owner; a new file is 0600,
    # since agents' settings files can hold credentials.
    write_atomic(change.path, change.after_text, keep_existing=True, durable=True)
    return dataclasses.replace(change, backup=backup, written=True)


def restore_check(change: FileChange) -> FileChange:
    """After uninstall wrote the file: when it is back byte for byte as a backup held it (the file before
    `engram install`), every backup of it is removed; otherwise (it was edited since) they stay."""
    if not change.written or change.removed:
        return change
    backups = backups_of(change.path)
    written = change.after_text.encode("utf-8")
    if not any(_bytes(b) == written for b in backups):
        return change
    for backup in backups:
        backup.unlink(missing_ok=True)
    return dataclasses.replace(change, restored=True, backup=None)


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
