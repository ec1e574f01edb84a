"""Forgetting: erase memories and take them out of every recollection, so they are never injected again.

The one path for `engram forget` and the MCP tool `memory_forget`: the store erases each memory's
content (``EpisodeStore.forget``; its id remembers that it was forgotten, and why), then every
recollection file that still offers it as a bite is rewritten without it. The SessionStart digest
reads active memories only, so it never shows a forgotten one.
"""

from __future__ import annotations

from processor.config import Settings
from processor.memory.episode_store import EpisodeStore, ForgetPlan
from processor.recall.recollections import drop_bites
from processor.store.episodes import Episode


def forget(store: EpisodeStore, settings: Settings, episode_id: str, reason: str | None = None) -> list[Episode]:
    """Forget one memory (and the older versions it replaced); returns what was erased, the memory first."""
    erased = store.forget(episode_id, reason)
    drop_bites(settings.recollections_dir, {e.id for e in erased})
    return erased


def forget_planned(store: EpisodeStore, settings: Settings, plan: ForgetPlan,
                   reason: str | None = None) -> list[Episode]:
    """Forget every memory of a plan made by ``EpisodeStore.plan_forget`` (shown to the user first)."""
    erased = store.forget_many([e.id for e in plan.episodes], reason)
    drop_bites(settings.recollections_dir, {e.id for e in erased})
    return erased
