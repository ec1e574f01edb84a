"""Register Engram with Claude Code: two hooks in settings.json, one user-scope MCP server.

What gets registered (see ``Registration``):
- ``PreToolUse`` (matcher ``*``): ``<real python> -I -S -c <LAUNCHER> /abs/recall_hook/pretooluse.py``
  (the launcher imports the hook so its bytecode is cached: see recall_hook/pretooluse.py);
- ``SessionStart`` (every source): ``<real python> -I -S -c <LAUNCHER> /abs/recall_hook/session_start.py``;
- ``PostToolUseFailure`` (matcher ``*``): ``<real python> -I -S -c <LAUNCHER> /abs/recall_hook/tool_failure.py``
  (what fixed the same failure in an earlier session, right after it);
- optionally (``Registration.prompt_submit``, ``engram install --prompt-submit``) ``UserPromptSubmit``:
  ``<real python> -I -S -c <LAUNCHER> /abs/recall_hook/prompt_submit.py``; the hook itself stays
  inert unless the ``prompt_submit_enabled`` setting is on (see recall_hook/prompt_submit.py);
- MCP server ``engram`` (stdio): ``<engram's python> -I -m mcp_tools.bridge``, which passes the session to
  the running processor's tools (``mcp_tools/bridge.py``: no second-long SDK import per session).

Where:
- hooks go in ``${CLAUDE_CONFIG_DIR:-~/.claude}/settings.json`` under ``hooks``, the documented
  place for user hooks;
- the MCP server goes in the user-scope MCP table, top-level ``mcpServers`` of Claude Code's
  ``.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` if that variable is set, else
  ``~/.claude.json``), which is where ``claude mcp add --scope user`` stores it; current Claude
  Code ignores ``mcpServers`` in settings.json. The file is edited directly rather than through
  ``claude mcp add`` so that install is idempotent (``mcp add`` fails on an existing name), can
  show its change before writing, and works when ``claude`` is a shell alias rather than on PATH.

Both files are edited the same careful way: parse (invalid JSON is an error naming the file and
nothing is written), change only Engram's own entries (recognised by the markers in their
commands), keep every other key and its order, back the file up, write a temp file in the same
directory and ``os.replace`` it, keep the file's mode. Installing twice changes nothing the second
time; uninstall removes exactly the entries install added (and containers that only held them).

The interpreters are absolute paths to real binaries: a pyenv/asdf shim is a shell script that
costs ~75 ms per hook call. The hook gets the base interpreter (it runs with ``-S`` and needs no
site-packages); the ``-m`` commands get the interpreter Engram is installed in (a venv's python,
not its resolved symlink, which would lose the venv). ``-I`` keeps the user's project directory
and PYTHON* variables from shadowing Engram's packages.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.files import write_atomic
from recall_hook.pretooluse import LAUNCHER
from recall_hook.prompt_submit import LAUNCHER as PROMPT_SUBMIT_LAUNCHER
from recall_hook.session_start import LAUNCHER as SESSION_START_LAUNCHER
from recall_hook.tool_failure import LAUNCHER as TOOL_FAILURE_LAUNCHER

MCP_SERVER_NAME = "engram"
PRETOOLUSE_MARKER = "recall_hook/pretooluse.py"
SESSION_START_MARKER = "recall_hook/session_start.py"
# What earlier versions registered for SessionStart (a `-m` command through site-packages, ~4x slower
# to start): still Engram's, replaced on install, removed on uninstall.
MODULE_SESSION_START_MARKER = "-m recall_hook.session_start"
LEGACY_SESSION_START_MARKER = "-m processor.recall.session_start"
PROMPT_SUBMIT_MARKER = "recall_hook/prompt_submit.py"
TOOL_FAILURE_MARKER = "recall_hook/tool_failure.py"
MCP_SERVER_MODULE = "mcp_tools.bridge"
# What earlier versions registered (the full server per session): still Engram's, replaced on install.
MCP_SERVER_MARKERS = (MCP_SERVER_MODULE, "mcp_tools.server")
# Any hook command containing one of these is Engram's: install replaces it, uninstall removes it.
HOOK_MARKERS = (PRETOOLUSE_MARKER, SESSION_START_MARKER, MODULE_SESSION_START_MARKER, LEGACY_SESSION_START_MARKER,
                PROMPT_SUBMIT_MARKER, TOOL_FAILURE_MARKER)
BACKUP_SUFFIX = ".engram-backup-"

JsonObject = dict[str, Any]


class InstallError(Exception):
    """Engram cannot be (un)registered; the message names the file or interpreter and the fix."""


# ---------------------------------------------------------------- interpreters and locations


def is_shim(path: str | os.PathLike[str]) -> bool:
    """True for a pyenv/asdf-style shim: a script (``#!``) or anything in a ``shims`` directory."""
    p = Path(path)
    if "shims" in p.parts:
        return True
    try:
        with open(p, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def _usable_interpreter(path: str | None) -> str | None:
    if not path or not os.path.isabs(path) or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return None
    if is_shim(path):
        real = os.path.realpath(path)  # a symlink into a shims dir; a shim script stays a shim
        return real if not is_shim(real) and os.access(real, os.X_OK) else None
    return path


def hook_python() -> str:
    """The real interpreter binary for the stdlib-only hook (it runs with -S, so no venv needed)."""
    # Unresolved first: a stable symlink (/usr/local/bin/python3.11, Homebrew's opt/) survives
    # upgrades that change the resolved Cellar path; realpath only to get past a shim.
    for candidate in (getattr(sys, "_base_executable", None), sys.executable):
        found = _usable_interpreter(candidate)
        if found:
            return found
    raise InstallError(
        f"cannot find a real Python binary for the hook (tried {sys.executable}); run `engram install` "
        "with the interpreter itself, e.g. `$(pyenv which python3) -m processor.cli install`"
    )


def engram_python() -> str:
    """The interpreter Engram is installed in, for the ``-m`` commands (a venv's python is kept as is)."""
    found = _usable_interpreter(os.path.abspath(sys.executable)) if sys.executable else None
    if found:
        return found
    raise InstallError(
        f"{sys.executable or 'sys.executable'} is not a usable interpreter (missing, or a shim); "
        "run `engram install` from the environment Engram is installed in"
    )


def hook_script() -> Path:
    """Absolute path of recall_hook/pretooluse.py as installed next to this package."""
    import recall_hook.pretooluse

    return Path(recall_hook.pretooluse.__file__).resolve()


def claude_config_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


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


# ---------------------------------------------------------------- what gets registered


@dataclass(frozen=True)
class HookSpec:
    event: str
    command: str
    timeout: int  # in the agent's unit: seconds for Claude Code and the Codex CLI, milliseconds for the Gemini CLI
    markers: tuple[str, ...]  # any hook command containing one of these is this hook (older versions' too)
    matcher: str | None = None  # None: the group has no matcher, so it fires for every source
    name: str | None = None  # a label the agent shows (the Gemini CLI's hook `name`)

    def entry(self) -> JsonObject:
        entry: JsonObject = {"type": "command", "command": self.command, "timeout": self.timeout}
        if self.name:
            entry["name"] = self.name
        return entry

    def group(self) -> JsonObject:
        group: JsonObject = {} if self.matcher is None else {"matcher": self.matcher}
        group["hooks"] = [self.entry()]
        return group


@dataclass(frozen=True)
class McpServerSpec:
    name: str
    command: str
    args: tuple[str, ...]

    def config(self) -> JsonObject:
        # The shape `claude mcp add --scope user` writes for a stdio server.
        return {"type": "stdio", "command": self.command, "args": list(self.args), "env": {}}


@dataclass(frozen=True)
class Registration:
    """The single source of what Engram registers; settings install and the plugin both use it."""

    hook_python: str
    engram_python: str
    hook_script: Path
    pretooluse_timeout: int = 10
    session_start_timeout: int = 30
    tool_failure_timeout: int = 10
    prompt_submit_timeout: int = 5
    # The optional UserPromptSubmit hook. True: registered; False: removed; None: left as the file
    # has it (an existing entry is refreshed in place, none is added).
    prompt_submit: bool | None = None

    @property
    def prompt_submit_hook(self) -> HookSpec:
        q = shlex.quote
        script = self.hook_script.with_name("prompt_submit.py")
        return HookSpec(
            event="UserPromptSubmit",
            command=f"{q(self.hook_python)} -I -S -c {q(PROMPT_SUBMIT_LAUNCHER)} {q(str(script))}",
            timeout=self.prompt_submit_timeout,
            markers=(PROMPT_SUBMIT_MARKER,),
        )

    @property
    def hooks(self) -> tuple[HookSpec, ...]:
        """The hooks a fresh settings file (or the plugin) gets."""
        optional = (self.prompt_submit_hook,) if self.prompt_submit else ()
        return self._required_hooks + optional

    @property
    def _required_hooks(self) -> tuple[HookSpec, ...]:
        q = shlex.quote
        return (
            HookSpec(
                event="PreToolUse",
                matcher="*",
                # Imported through a launcher, not run as a script, so its cached bytecode is used.
                command=f"{q(self.hook_python)} -I -S -c {q(LAUNCHER)} {q(str(self.hook_script))}",
                timeout=self.pretooluse_timeout,
                markers=(PRETOOLUSE_MARKER,),
            ),
            HookSpec(
                event="PostToolUseFailure",
                matcher="*",
                command=f"{q(self.hook_python)} -I -S -c {q(TOOL_FAILURE_LAUNCHER)} "
                        f"{q(str(self.hook_script.parent / 'tool_failure.py'))}",
                timeout=self.tool_failure_timeout,
                markers=(TOOL_FAILURE_MARKER,),
            ),
            HookSpec(
                event="SessionStart",
                # Stdlib only, like PreToolUse: the base interpreter with -S (see recall_hook/session_start.py).
                command=f"{q(self.hook_python)} -I -S -c {q(SESSION_START_LAUNCHER)} "
                        f"{q(str(self.hook_script.parent / 'session_start.py'))}",
                timeout=self.session_start_timeout,
                markers=(SESSION_START_MARKER, MODULE_SESSION_START_MARKER, LEGACY_SESSION_START_MARKER),
            ),
        )

    def hook(self, event: str) -> HookSpec:
        return next(spec for spec in (*self._required_hooks, self.prompt_submit_hook) if spec.event == event)

    @property
    def mcp_server(self) -> McpServerSpec:
        return McpServerSpec(MCP_SERVER_NAME, self.engram_python, ("-I", "-m", MCP_SERVER_MODULE))

    def hook_command(self, script: str, launcher: str, agent: str | None = None) -> str:
        """The registered command of the hook script `script` (a file of recall_hook/), for `agent` (the hooks
        read it after the script's path; none is Claude Code)."""
        q = shlex.quote
        command = f"{q(self.hook_python)} -I -S -c {q(launcher)} {q(str(self.hook_script.with_name(script)))}"
        return f"{command} {agent}" if agent else command

    def hooks_table(self) -> dict[str, list[JsonObject]]:
        """The ``hooks`` object as a fresh settings.json (or a plugin's hooks.json) holds it."""
        table: dict[str, list[JsonObject]] = {}
        for spec in self.hooks:
            table.setdefault(spec.event, []).append(spec.group())
        return table


def default_registration() -> Registration:
    return Registration(hook_python=hook_python(), engram_python=engram_python(), hook_script=hook_script())


def run_hook(
    registration: Registration,
    stdin: bytes,
    *,
    write_bytecode: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run the registered PreToolUse command as Claude Code would (minus the shell)."""
    argv = shlex.split(registration.hook("PreToolUse").command)
    if not write_bytecode:
        argv.insert(1, "-B")
    return subprocess.run(
        argv, input=stdin, capture_output=True, timeout=30, cwd=tempfile.gettempdir(),
        env=None if env is None else dict(env),
    )


def _imports_this_engram(python: str) -> str | None:
    """None if `python -I` (run from elsewhere, as Claude Code does) imports this Engram, else why not."""
    import mcp_tools
    import processor

    probe = "import processor, mcp_tools; print(processor.__file__); print(mcp_tools.__file__)"
    try:
        done = subprocess.run(
            [python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    expected = [os.path.realpath(processor.__file__), os.path.realpath(mcp_tools.__file__)]
    if done.returncode == 0 and [os.path.realpath(line) for line in done.stdout.split()] == expected:
        return None
    return (
        f"{python} -I does not import this Engram ({Path(expected[0]).parent.parent}); install it into "
        "that environment (pip install -e <repo>) or run `engram install` from it"
    )


def check_registration(registration: Registration) -> None:
    """Refuse to register commands that would fail on every tool call or session start."""
    problems = []
    for label, python in (("hook", registration.hook_python), ("engram", registration.engram_python)):
        if not os.path.isabs(python) or not os.path.isfile(python) or not os.access(python, os.X_OK):
            problems.append(f"{label} interpreter {python} is not an executable file")
        elif is_shim(python):
            problems.append(f"{label} interpreter {python} is a shim; use the real binary it runs")
    if not registration.hook_script.is_file():
        problems.append(f"hook script {registration.hook_script} does not exist")
    prompt_script = registration.hook_script.with_name("prompt_submit.py")
    if registration.prompt_submit and not prompt_script.is_file():
        problems.append(f"hook script {prompt_script} does not exist")
    if not problems:
        # Smoke test: the exact registered command, fed empty stdin, must exit 0 saying nothing.
        try:
            done = run_hook(registration, b"", write_bytecode=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"cannot run the hook command: {exc}")
        else:
            if done.returncode != 0 or done.stdout:
                err = done.stderr.decode(errors="replace").strip()[-300:]
                out = done.stdout[:100]
                problems.append(f"the hook command exited {done.returncode}, printing {out!r}: {err}")
        problem = _imports_this_engram(registration.engram_python)
        if problem:
            problems.append(problem)
    if problems:
        raise InstallError("; ".join(problems))


# ---------------------------------------------------------------- pure merges


def is_engram_hook(hook: object, markers: tuple[str, ...] = HOOK_MARKERS) -> bool:
    command = hook.get("command") if isinstance(hook, dict) else None
    return isinstance(command, str) and any(marker in command for marker in markers)


def is_engram_mcp_server(config: object) -> bool:
    if not isinstance(config, dict):
        return False
    args = config.get("args")
    parts = [config.get("command"), *(args if isinstance(args, list) else [])]
    return any(isinstance(p, str) and any(marker in p for marker in MCP_SERVER_MARKERS) for p in parts)


def _object_at(data: JsonObject, key: str, path: Path) -> JsonObject | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InstallError(f'{path}: "{key}" is a {type(value).__name__}, expected an object; fix the file')
    return value


def add_hooks(settings: JsonObject, registration: Registration, path: Path) -> JsonObject:
    """A copy of `settings` with Engram's hooks registered once, other hooks untouched.

    An Engram hook already present is updated where it stands (so a matcher the user narrowed is
    kept); duplicates are dropped; a missing one is appended as a group of its own.
    """
    specs = [(spec, True) for spec in registration.hooks]
    if registration.prompt_submit is None:
        specs.append((registration.prompt_submit_hook, False))  # refreshed only where present
    drop = (PROMPT_SUBMIT_MARKER,) if registration.prompt_submit is False else ()
    return add_hook_specs(settings, specs, path, drop=drop)


def add_hook_specs(settings: JsonObject, specs: list[tuple[HookSpec, bool]], path: Path,
                   drop: tuple[str, ...] = ()) -> JsonObject:
    """A copy of `settings` (any agent's hooks file in Claude Code's shape) with each (spec, required) hook
    registered once: updated where it stands, or (required) appended as a group of its own; hooks marked by
    `drop` are removed first."""
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


def add_mcp_server(config: JsonObject, server: McpServerSpec, path: Path, entry: JsonObject | None = None,
                   remove_hint: str | None = None) -> JsonObject:
    """A copy of `config` with Engram's server in its ``mcpServers`` (`entry`: the agent's shape of it, else
    Claude Code's); a server of that name that is not Engram's is an error naming the fix."""
    result = copy.deepcopy(config)
    servers = _object_at(result, "mcpServers", path)
    if servers is None:
        servers = result["mcpServers"] = {}
    existing = servers.get(server.name)
    if existing is not None and not is_engram_mcp_server(existing):
        raise InstallError(
            f"{path}: an MCP server named {server.name!r} is already registered and is not Engram's "
            f"({json.dumps(existing)[:200]}); remove it "
            f"({remove_hint or f'claude mcp remove --scope user {server.name}'}) and retry"
        )
    wanted = entry if entry is not None else server.config()
    if existing != wanted:
        servers[server.name] = wanted
    return result


def remove_mcp_server(config: JsonObject, path: Path, name: str = MCP_SERVER_NAME) -> JsonObject:
    result = copy.deepcopy(config)
    servers = _object_at(result, "mcpServers", path)
    if servers and is_engram_mcp_server(servers.get(name)):
        del servers[name]
        if not servers:
            del result["mcpServers"]
    return result


# ---------------------------------------------------------------- files


@dataclass(frozen=True)
class FileChange:
    """One JSON file's planned (or applied) change.

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
    agent: str = "Claude Code"
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


def read_object(path: Path, hint: str | None = None) -> tuple[JsonObject, str | None]:
    """A JSON settings file's object and text ({} and None when it does not exist); InstallError naming the
    file, the place and the fix when it cannot be used (`hint`: what else to say about it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: cannot read ({exc}); nothing was changed") from None
    if not text.strip():
        return {}, text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstallError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            f"{hint + '; ' if hint else ''}fix or move the file aside, nothing was changed"
        ) from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InstallError(f"{path}: expected a JSON object, not a {kind}; nothing was changed")
    return data, text


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
    # since Claude Code's files can hold credentials.
    write_atomic(change.path, change.after_text, keep_existing=True, durable=True)
    return dataclasses.replace(change, backup=backup, written=True)


# ---------------------------------------------------------------- public entry points


def install(
    settings_path: Path | None = None,
    mcp_config_path: Path | None = None,
    registration: Registration | None = None,
    *,
    dry_run: bool = False,
    check: bool = True,
) -> ChangeReport:
    """Register Engram's hooks in `settings_path` and its MCP server in `mcp_config_path`.

    Defaults: ``default_settings_path()`` and ``default_mcp_config_path()`` (both honour
    CLAUDE_CONFIG_DIR) and ``default_registration()`` (this interpreter and this checkout). With
    `check`, refuses interpreters that are shims, a hook command that fails, or an interpreter that
    cannot import this Engram. Both files are parsed before either is written, so one malformed
    file means nothing is written. `dry_run` (``--print``) writes nothing and reports the change.
    """
    settings_path = settings_path or default_settings_path()
    mcp_config_path = mcp_config_path or default_mcp_config_path()
    registration = registration or default_registration()
    if check:
        check_registration(registration)

    settings, settings_text = read_object(settings_path)
    config, config_text = read_object(mcp_config_path)
    new_settings = add_hooks(settings, registration, settings_path)
    new_config = add_mcp_server(config, registration.mcp_server, mcp_config_path)
    changes = (
        plan_change(settings_path, settings, settings_text, new_settings, "hooks"),
        plan_change(mcp_config_path, config, config_text, new_config, "mcpServers", MCP_SERVER_NAME),
    )
    if not dry_run:
        changes = tuple(apply_change(c) for c in changes)
        if check:
            # Cache the hook's bytecode (recall_hook/__pycache__) now rather than on the first call.
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                run_hook(registration, b"")
    return ChangeReport("install", dry_run, changes)


def uninstall(
    settings_path: Path | None = None,
    mcp_config_path: Path | None = None,
    *,
    dry_run: bool = False,
) -> ChangeReport:
    """Remove exactly Engram's hooks and MCP server; everything else in both files stays as it was."""
    settings_path = settings_path or default_settings_path()
    mcp_config_path = mcp_config_path or default_mcp_config_path()
    settings, settings_text = read_object(settings_path)
    config, config_text = read_object(mcp_config_path)
    changes = []
    # A missing file holds nothing of Engram's: it is not created.
    if settings_text is not None:
        new_settings = remove_hooks(settings, settings_path)
        changes.append(plan_change(settings_path, settings, settings_text, new_settings, "hooks"))
    if config_text is not None:
        new_config = remove_mcp_server(config, mcp_config_path)
        changes.append(plan_change(mcp_config_path, config, config_text, new_config, "mcpServers", MCP_SERVER_NAME))
    if not dry_run:
        changes = [apply_change(c) for c in changes]
    return ChangeReport("uninstall", dry_run, tuple(changes))
