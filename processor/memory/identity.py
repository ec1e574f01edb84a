"""How a memory is known: its id, from what made it, and its content hash, from its words.

An id is stable: the same round, statement or failure mined again (a rebuild, a slice redone after a crash that
lost its progress marker) makes the same id, so nothing is stored twice and what a person did to a memory (expanded,
forgotten, marked wrong) stays with it. Stores already hold ids made this way: the recipe must never change.

Cheap to import (hashlib only): the verbatim builder and every miner use it.
"""

from __future__ import annotations

import hashlib


def episode_id(seed: str) -> str:
    """The id of the memory that `seed` names ("fact:<project>:…", "<first message uuid>:<piece>")."""
    return "ep_" + hashlib.sha1(seed.encode()).hexdigest()[:16]


def content_hash(text: str) -> str:
    """A memory's identity for exact duplicates: case and whitespace do not make a new memory."""
    return hashlib.sha256(" ".join(text.split()).lower().encode()).hexdigest()
