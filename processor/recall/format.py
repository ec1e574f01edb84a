"""How recall results read as text: the lines `memory_recall` and `engram recall` print, and an expansion."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own import is not needed: the MCP server imports this before `initialize`
if TYPE_CHECKING:
    from processor.memory.episode_store import Expansion, Hit


def format_hits(hits: list[Hit]) -> str:
    """Seed 001's recall format, with the agent the memory was learned in: `[1] (2026-02-20, high, Codex) summary
    — ID: ep_abc` (no agent for a memory from no session: one stored on purpose, a teammate's)."""
    if not hits:
        return "No memories found."
    from processor.config import AGENT_NAMES

    def where(h: Hit) -> str:
        agent = getattr(h, "agent", None)
        return f", {AGENT_NAMES.get(agent, agent)}" if agent else ""

    return "\n".join(f"[{i}] ({h.date}, {h.importance}{where(h)}) {h.bite} — ID: {h.id}"
                     + (f" [{h.note}]" if h.note else "") for i, h in enumerate(hits, 1))


def format_expansion(e: Expansion) -> str:
    lines = [f"## Memory {e.id}", f"**Date:** {e.date}", f"**Project:** {e.project or '(global)'}",
             f"**Importance:** {e.importance}  **Kind:** {e.kind}  **Source:** {e.source_type}",
             "", f"**Summary:** {e.summary}", "", "**Full context:**", e.full_content]
    if e.entities:
        lines += ["", "**Entities:** " + ", ".join(e.entities)]
    if e.source_messages:
        from processor.config import AGENT_NAMES

        first, last = e.source_messages[0], e.source_messages[-1]
        agent = getattr(e, "agent", None)
        by = f", {AGENT_NAMES.get(agent, agent)}" if agent else ""
        lines += ["", f"**From session** {first['session_id']}{by} ({first['timestamp']} – {last['timestamp']}), "
                  f"{len(e.source_messages)} message(s)"]
    for source in e.auto_memory:
        first, last = source["lines"]
        gone = "" if source["present"] else ", since removed from the file"
        lines += ["", f"**From Claude Code's auto memory:** {source['cite']} (lines {first}–{last}{gone}) — "
                  f"{source['file']}"]
    if e.origin:
        lines += ["", f"**Made on:** {e.origin} (shared memory)"]
    if e.superseded_by:
        lines += ["", f"Superseded by {e.superseded_by}."]
    if e.status not in ("active", "superseded"):
        lines += ["", f"**Status:** {e.status}"]
    return "\n".join(lines)

