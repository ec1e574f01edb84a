"""Which agents' transcripts are captured, and where each keeps them: one format per agent, from the settings.

Claude Code's under ``projects_dir`` (``discover.TranscriptFilter``), the Codex CLI's under
``<codex home>/sessions`` (``codex``), the Gemini CLI's under ``<gemini dir>/tmp`` (``gemini``); the
``agents`` setting names the ones captured (all three by default). Engram's own LLM jobs run in its
agent work directory, and no agent's session from there is captured.
"""

from __future__ import annotations

from pathlib import Path

from processor.capture.codex import CodexFormat, codex_sessions_root
from processor.capture.discover import TranscriptFilter
from processor.capture.formats import AGENTS, CLAUDE, CODEX, GEMINI, TranscriptFormat
from processor.capture.gemini import GeminiFormat, gemini_sessions_root
from processor.config import Settings, agent_names


def captured_agents(settings: Settings) -> tuple[str, ...]:
    """The agents named by the ``agents`` setting (load_settings refused unknown names), in Engram's order."""
    named = agent_names(settings.capture_agents)
    return tuple(a for a in AGENTS if a in named)


def transcript_formats(settings: Settings) -> list[TranscriptFormat]:
    """Every captured agent's transcripts, Claude Code's first."""
    formats: list[TranscriptFormat] = []
    agents = captured_agents(settings)
    if CLAUDE in agents:
        formats.append(TranscriptFilter(settings.transcripts_root, settings.agent_workdir))
    if CODEX in agents and settings.codex_dir is not None:
        formats.append(CodexFormat(codex_sessions_root(settings.codex_dir), settings.agent_workdir))
    if GEMINI in agents and settings.gemini_dir is not None:
        formats.append(GeminiFormat(gemini_sessions_root(settings.gemini_dir), settings.agent_workdir))
    return formats


def format_of(formats: list[TranscriptFormat], path: Path) -> TranscriptFormat | None:
    """The format whose session file `path` is (None: no agent's)."""
    return next((fmt for fmt in formats if fmt.accepts(path)), None)
