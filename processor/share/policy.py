"""What leaves the machine, and for whom: the rules of the two scopes, in one place.

*My machines*: every memory this person's processors make, except those of a session that opted out
(``[engram off]``, off the record, ``ENGRAM_OFF``): nothing of such a session ever reaches the server, and
what was pushed before the opt-out is taken back (tombstones). A memory over ``share_max_memory_kb`` stays
on this machine. *Team*: of a project shared with a team, only what is not verbatim conversation —
decisions, conventions, fixes, gotchas, commit messages, project-scoped preferences and anything stored on
purpose (``memory_remember``).
"""

from __future__ import annotations

from processor.store.share import LocalMemory

TEAM_KINDS = frozenset({"decision", "convention", "bugfix", "gotcha", "preference"})


def stays_local(memory: LocalMemory) -> bool:
    """A memory of an opted-out session: never shared (what was shared before the opt-out is withdrawn)."""
    return memory.session_opt_out is not None


def too_large(memory: LocalMemory, max_bytes: int) -> bool:
    return len(memory.full_content.encode()) + len(memory.summary.encode()) > max_bytes


def team_eligible(memory: LocalMemory, *, is_commit: bool) -> bool:
    """Whether a memory of a team project goes to the team (it always goes to this person's machines)."""
    if memory.source_type == "verbatim" or memory.scope != "project" or not memory.project:
        return False
    if memory.source_type == "manual":
        return True  # stored on purpose: memory_remember, `engram remember`
    return memory.kind in TEAM_KINDS or is_commit
