"""The SQL of memory origins: which miner made a memory (``Finding.miner``, ``processor/memory/miners.py``).

A memory's origin decides how it is told: the lesson index expires what a fact or a decision said once it has been
told (``processor/recall/lesson_index.py``), the prompt hook leaves to their calls what is told at a tool call
(``processor/memory/unasked.py``), and the viewer groups what is told unasked by it. Callers own the transaction.
"""

from __future__ import annotations

import apsw

from processor.store.in_list import rows_in


def set_origin(conn: apsw.Connection, episode_id: str, miner: str) -> None:
    """Note the miner that made a memory (the first one noted is kept)."""
    conn.execute("INSERT OR IGNORE INTO memory_origins (episode_id, miner) VALUES (?, ?)", (episode_id, miner))


def origins(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, str]:
    """The miner of each of these memories that one made (a memory written by a person or a job has none)."""
    return dict(rows_in(conn, "SELECT episode_id, miner FROM memory_origins WHERE episode_id IN ({marks})",
                        episode_ids))
