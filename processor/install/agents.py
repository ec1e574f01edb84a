"""`engram install` / `engram uninstall` across agents: the agents Engram registers with (adding one is one line
here), which of them are on this machine, and the registration with each.

By default install registers with every agent found here — its folder exists (``~/.claude``, ``~/.claude.json``,
``$CODEX_HOME`` or ``~/.codex``, ``~/.gemini``, ``~/.copilot``, ``~/.qwen``, ``~/.config/opencode``,
``~/.pi/agent``) or its command is on PATH — and, when none is found, with Claude Code. Uninstall by default
removes Engram from every agent (a file holding nothing of Engram's is left alone, a missing one is not created).
One agent's unreadable settings file is that agent's error, with its fix; the others are still registered.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from processor.check import Check
from processor.config import AGENT_NAMES, Settings
from processor.install import claude, codex, copilot, gemini, opencode, pi, qwen
from processor.install.json_file import ChangeReport
from processor.install.registration import HookSpec, InstallError, Registration, check_registration, run_hook


class Agent(Protocol):
    """What every agent's module answers (``claude``, ``codex``, ``gemini``, ``copilot``, ``qwen``, ``opencode``,
    ``pi``)."""

    NAME: str  # as `--agent` and the `agents` setting name it
    TITLE: str  # as people know it (``config.AGENT_NAMES``)

    def found(self, env: Mapping[str, str] | None = None) -> bool:
        """The agent is on this machine."""
        ...

    def hook_specs(self, registration: Registration) -> list[tuple[HookSpec, bool]]:
        """Engram's hooks for this agent, each with whether install adds it (else it is refreshed where present)."""
        ...

    def install(self, registration: Registration, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
                **options: object) -> ChangeReport:
        """Register Engram; `options` are ``install``'s (``trust``), each agent takes those it knows."""
        ...

    def uninstall(self, *, dry_run: bool = False, env: Mapping[str, str] | None = None) -> ChangeReport:
        """Remove exactly what install added."""
        ...

    def problems(self, settings: Settings, env: Mapping[str, str]) -> list[Check]:
        """What `engram doctor` finds of Engram's registration with the agent, right or wrong."""
        ...


AGENTS: dict[str, Agent] = {claude.NAME: claude, codex.NAME: codex, gemini.NAME: gemini,
                            copilot.NAME: copilot, qwen.NAME: qwen}
AGENTS[opencode.NAME] = opencode
AGENTS[pi.NAME] = pi
# Registered with when no agent is found here: Engram began as Claude Code's memory.
DEFAULT_AGENT = claude.NAME


def found_agents(env: Mapping[str, str] | None = None) -> list[str]:
    """The agents installed here: their folder exists or their command is on PATH (Claude Code when none is)."""
    env = os.environ if env is None else env
    return [name for name, agent in AGENTS.items() if agent.found(env)] or [DEFAULT_AGENT]


def chosen(agent: str | None, env: Mapping[str, str] | None = None, *, uninstall: bool = False) -> list[str]:
    """The agents `--agent` names: one, `all` (to install: every agent installed here, so nothing is created for
    one that is not; to uninstall: every agent), or (none given) those found here — every agent for uninstall."""
    if agent in (None, ""):
        return list(AGENTS) if uninstall else found_agents(env)
    if agent == "all":
        env = os.environ if env is None else env
        return list(AGENTS) if uninstall else [name for name, known in AGENTS.items() if known.found(env)]
    if agent not in AGENTS:
        raise InstallError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)} or all")
    return [agent]


@dataclass(frozen=True)
class Outcome:
    """One agent's report, or the error that left its files untouched."""

    agent: str
    report: ChangeReport | None = None
    error: str | None = None

    def describe(self) -> str:
        title = f"== {AGENT_NAMES[self.agent]}"
        if self.error is not None:
            return f"{title}: not changed: {self.error}\n"
        assert self.report is not None
        return f"{title}\n{self.report.describe()}"


def install(agents: list[str], registration: Registration, *, dry_run: bool = False, check: bool = True,
            trust: bool = True, env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Register Engram with each agent; the registration is checked once (a broken one registers nowhere)."""
    if check:
        check_registration(registration)
    outcomes = _each(agents, lambda agent: agent.install(registration, dry_run=dry_run, env=env, trust=trust))
    if check and not dry_run and any(outcome.report is not None for outcome in outcomes):
        # Cache the hooks' bytecode (recall_hook/__pycache__) now rather than on the first call.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            run_hook(registration, b"")
    return outcomes


def uninstall(agents: list[str], *, dry_run: bool = False, env: Mapping[str, str] | None = None) -> list[Outcome]:
    return _each(agents, lambda agent: agent.uninstall(dry_run=dry_run, env=env))


def _each(agents: list[str], change: Callable[[Agent], ChangeReport]) -> list[Outcome]:
    """`change` made to each agent; one agent's error is its outcome, and the others are still changed."""
    outcomes = []
    for name in agents:
        try:
            report = change(AGENTS[name])
        except InstallError as exc:
            outcomes.append(Outcome(name, error=str(exc)))
        else:
            outcomes.append(Outcome(name, report))
    return outcomes
