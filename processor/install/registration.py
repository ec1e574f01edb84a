"""What Engram registers with an agent, and with which interpreters: the hook scripts and the markers that
recognise their commands (older Engrams' too), the MCP server, and the check that refuses a registration that
would fail on every tool call.

Each agent's module (``claude``, ``codex``, ``gemini``) turns one ``Registration`` into that agent's hook specs:
the same four scripts of ``recall_hook/`` under the agent's own event names, each command
``<real python> -I -S -c <LAUNCHER> /abs/recall_hook/<script>.py [agent]`` (the launcher imports the hook so its
bytecode is cached: see recall_hook/pretooluse.py; the agent's name after the script tells the hook whose tool
names to use, none is Claude Code). The MCP server is ``<engram's python> -I -m mcp_tools.bridge``, which passes
the session to the running processor's tools (``mcp_tools/bridge.py``: no second-long SDK import per session).

The interpreters are absolute paths to real binaries: a pyenv/asdf shim is a shell script that costs ~75 ms per
hook call. The hook gets the base interpreter (it runs with ``-S`` and needs no site-packages); the ``-m``
commands get the interpreter Engram is installed in (a venv's python, not its resolved symlink, which would lose
the venv). ``-I`` keeps the user's project directory and PYTHON* variables from shadowing Engram's packages.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recall_hook.pretooluse import LAUNCHER as PRETOOLUSE_LAUNCHER
from recall_hook.prompt_submit import LAUNCHER as PROMPT_SUBMIT_LAUNCHER
from recall_hook.session_start import LAUNCHER as SESSION_START_LAUNCHER
from recall_hook.tool_failure import LAUNCHER as TOOL_FAILURE_LAUNCHER

MCP_SERVER_NAME = "engram"
MCP_SERVER_MODULE = "mcp_tools.bridge"
# What earlier versions registered (the full server per session): still Engram's, replaced on install.
MCP_SERVER_MARKERS = (MCP_SERVER_MODULE, "mcp_tools.server")
PRETOOLUSE_MARKER = "recall_hook/pretooluse.py"
SESSION_START_MARKER = "recall_hook/session_start.py"
# What earlier versions registered for SessionStart (a `-m` command through site-packages, ~4x slower
# to start): still Engram's, replaced on install, removed on uninstall.
MODULE_SESSION_START_MARKER = "-m recall_hook.session_start"
LEGACY_SESSION_START_MARKER = "-m processor.recall.session_start"
PROMPT_SUBMIT_MARKER = "recall_hook/prompt_submit.py"
TOOL_FAILURE_MARKER = "recall_hook/tool_failure.py"
# Any hook command containing one of these is Engram's: install replaces it, uninstall removes it.
HOOK_MARKERS = (PRETOOLUSE_MARKER, SESSION_START_MARKER, MODULE_SESSION_START_MARKER, LEGACY_SESSION_START_MARKER,
                PROMPT_SUBMIT_MARKER, TOOL_FAILURE_MARKER)

JsonObject = dict[str, Any]


class InstallError(Exception):
    """Engram cannot be (un)registered; the message names the file or interpreter and the fix."""


# ---------------------------------------------------------------- interpreters


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


# ---------------------------------------------------------------- what gets registered


@dataclass(frozen=True)
class HookScript:
    """One of recall_hook/'s entry points: its file, the launcher that imports it, and the markers that make a
    command Engram's registration of it (what older Engrams registered for it too)."""

    file: str
    launcher: str
    markers: tuple[str, ...]


PRETOOLUSE = HookScript("pretooluse.py", PRETOOLUSE_LAUNCHER, (PRETOOLUSE_MARKER,))
TOOL_FAILURE = HookScript("tool_failure.py", TOOL_FAILURE_LAUNCHER, (TOOL_FAILURE_MARKER,))
SESSION_START = HookScript("session_start.py", SESSION_START_LAUNCHER,
                           (SESSION_START_MARKER, MODULE_SESSION_START_MARKER, LEGACY_SESSION_START_MARKER))
PROMPT_SUBMIT = HookScript("prompt_submit.py", PROMPT_SUBMIT_LAUNCHER, (PROMPT_SUBMIT_MARKER,))


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


@dataclass(frozen=True)
class Registration:
    """What Engram registers with any agent: the interpreters, where the hook scripts are, their timeouts (in
    seconds), whether the optional prompt hook is wanted, and the MCP server. Each agent's module makes its own
    hook specs from it; settings install and the Claude Code plugin both use it."""

    hook_python: str
    engram_python: str
    hook_script: Path  # recall_hook/pretooluse.py: the other scripts are its neighbours
    pretooluse_timeout: int = 10
    session_start_timeout: int = 30
    tool_failure_timeout: int = 10
    prompt_submit_timeout: int = 5
    # The optional prompt hook (UserPromptSubmit, the Gemini CLI's BeforeAgent). True: registered; False: removed;
    # None: left as the file has it (an existing entry is refreshed in place, none is added).
    prompt_submit: bool | None = None

    @property
    def mcp_server(self) -> McpServerSpec:
        return McpServerSpec(MCP_SERVER_NAME, self.engram_python, ("-I", "-m", MCP_SERVER_MODULE))

    def hook_command(self, script: HookScript, agent: str | None = None) -> str:
        """The registered command of `script`, for `agent` (the hooks read it after the script's path; none is
        Claude Code). Imported through the script's launcher, not run as a script, so its cached bytecode is
        used."""
        q = shlex.quote
        command = (f"{q(self.hook_python)} -I -S -c {q(script.launcher)} "
                   f"{q(str(self.hook_script.with_name(script.file)))}")
        return f"{command} {agent}" if agent else command

    def hook_spec(self, event: str, script: HookScript, agent: str | None = None, *, matcher: str | None = None,
                  name: str | None = None, timeout_unit: int = 1) -> HookSpec:
        """`script` registered for an agent's `event` (`timeout_unit`: the agent's timeout unit in a second)."""
        timeouts = {PRETOOLUSE: self.pretooluse_timeout, TOOL_FAILURE: self.tool_failure_timeout,
                    SESSION_START: self.session_start_timeout, PROMPT_SUBMIT: self.prompt_submit_timeout}
        return HookSpec(event, self.hook_command(script, agent), timeouts[script] * timeout_unit, script.markers,
                        matcher=matcher, name=name)

    def with_prompt_hook(self, prompt: HookSpec) -> list[tuple[HookSpec, bool]]:
        """(`prompt`, required) as `prompt_submit` asks: added when True, refreshed only where present when None,
        left out when False (install then drops it: ``dropped_markers``)."""
        return [] if self.prompt_submit is False else [(prompt, bool(self.prompt_submit))]

    @property
    def dropped_markers(self) -> tuple[str, ...]:
        """The markers of the hooks install removes: the prompt hook's, when it is not wanted."""
        return PROMPT_SUBMIT.markers if self.prompt_submit is False else ()


def default_registration() -> Registration:
    return Registration(hook_python=hook_python(), engram_python=engram_python(), hook_script=hook_script())


# A registration whose commands are never run: the events and markers of each agent's hook specs, which doctor
# reads, do not depend on the interpreters (and doctor must not refuse a shim the way install does).
EVENTS_AND_MARKERS = Registration(hook_python="python3", engram_python="python3", hook_script=Path(PRETOOLUSE_MARKER))


# ---------------------------------------------------------------- the check before registering


def run_hook(
    registration: Registration,
    stdin: bytes,
    *,
    write_bytecode: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run the registered PreToolUse command as an agent would (minus the shell)."""
    argv = shlex.split(registration.hook_command(PRETOOLUSE))
    if not write_bytecode:
        argv.insert(1, "-B")
    return subprocess.run(
        argv, input=stdin, capture_output=True, timeout=30, cwd=tempfile.gettempdir(),
        env=None if env is None else dict(env),
    )


def _imports_this_engram(python: str) -> str | None:
    """None if `python -I` (run from elsewhere, as an agent does) imports this Engram, else why not."""
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
    prompt_script = registration.hook_script.with_name(PROMPT_SUBMIT.file)
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


# ---------------------------------------------------------------- what is registered already


def is_engram_hook(hook: object, markers: tuple[str, ...] = HOOK_MARKERS) -> bool:
    command = hook.get("command") if isinstance(hook, dict) else None
    return isinstance(command, str) and any(marker in command for marker in markers)


def is_engram_mcp_server(config: object) -> bool:
    if not isinstance(config, dict):
        return False
    args = config.get("args")
    parts = [config.get("command"), *(args if isinstance(args, list) else [])]
    return any(isinstance(p, str) and any(marker in p for marker in MCP_SERVER_MARKERS) for p in parts)


def missing_programs(argv: Iterable[str]) -> list[str]:
    """Absolute paths in a registered command that no longer exist (a deleted venv, a moved checkout)."""
    return [arg for arg in argv if os.path.isabs(arg) and not os.path.exists(arg)]


def gone_in(commands: Iterable[str]) -> list[str]:
    """What the registered shell `commands` need and is gone; a command that cannot be split is itself gone."""
    gone: list[str] = []
    for command in commands:
        try:
            gone += missing_programs(shlex.split(command))
        except ValueError:
            gone.append(command)
    return gone


def on_this_machine(paths: Iterable[str | os.PathLike[str]], command: str, env: Mapping[str, str]) -> bool:
    """An agent is here when one of its files or folders exists or its command is on PATH."""
    return any(os.path.exists(path) for path in paths) or shutil.which(command, path=env.get("PATH")) is not None
