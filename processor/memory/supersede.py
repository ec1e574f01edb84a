"""When a newer episode states that something changed about the subject of an older one, the older is superseded.

No LLM. A false supersede hides a good memory from every bite and digest, so all three tests must hold:

1. **similar**: the two episodes' vectors are at least ``supersede_similarity`` apart (cosine), both of one
   project (project-scoped), the newer made strictly later, and not pieces of one round (one piece of work,
   whose later steps naturally replace its earlier tries);
2. **a change is stated**: one sentence of the newer says that something changed — "no longer", "replaced
   by", "switched to", "use X instead", "is now", "now uses", "from now on"… — as an assertion:
   questions, proposals, conditionals and diagnoses ("should we use X instead?", "let me try X instead",
   "if X no longer…", "the problem is it loads X instead of Y") state no change;
3. **about the same subject**: that very sentence names a subject the older episode names too: a file, a
   path, a code identifier (``snake_case``, ``camelCase``, ``dotted.name``, ``call()``), a backticked span or
   one of the older episode's entities. Plain words are not subjects: "tests", "the config" are too common.
   When the sentence names what was replaced ("changed from 3.6+", "instead of ScriptProcessor", "replaced
   X with"), the older episode must mention it; when it does not, the shared subject must come before the
   change word (what changed), not only after it (the new value: an older episode that proposed or used
   that very thing is fulfilled, not outdated).

A user's standing instruction (a ``preference`` or ``convention`` episode) is only superseded by another one
(the user's own words), never by what an assistant said in passing.

The older memory keeps everything: status ``superseded``, ``superseded_by`` the newer one, ``valid_to`` the
time the newer one was said (the cold path's own marks, ``processor.store.cold.supersede_into``), and one
``cold_actions`` row naming the sentence that superseded it. It stays searchable (``memory_recall`` marks
it), ranks below its successor, and is never a bite or in the digest (both read active memories only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import apsw
import numpy as np

from processor.memory.search import VectorIndex
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import sessions as sessions_sql
from processor.store import write_transaction
from processor.store.episodes import Episode

NEIGHBOURS = 8  # nearest episodes looked at for each new one
STANDING = frozenset({"preference", "convention"})
JOB_TYPE = "recency"

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
# "Deprecated" and "obsolete" are left out: "X is deprecated" says what X is (most often an outside API),
# not that the project changed. "Renamed" is left out too: a rename makes a memory's name stale, not what it
# says; the inquisitor rewrites such names from git (memory.code_check) instead of hiding the memory.
_CHANGE = re.compile(
    r"\b(?:no longer|not any ?more|(?:does|do|is|are|was|were)n't\s+\w+\s+any ?more|"
    r"replaced (?:by|with)|replaces|in favou?r of|switched (?:to|from|over)|swapped|migrated (?:to|from)|"
    r"moved (?:to|from|over)|superseded|changed (?:to|from|it to)|from now on|"
    r"reverted|rolled (?:it |that )?back|(?:is|are)\s+(?:`[^`]+`|\S+)\s+again\b|"
    r"(?:use|uses|using|used|chose|choose|picked|went with|go with)\b[^.;]*\binstead\b|"
    r"(?:is|are|does|do|has|have)\s+now\b(?!\s+(?:correctly|properly|working|works|fixed|passing|fine|ready|"
    r"done|complete|available|showing|shown|visible))|"
    r"(?<=\w )(?<!can )(?<!could )(?<!may )(?<!might )now\s+(?:uses?|returns?|lives?|calls?|reads?|writes?|"
    r"points?|defaults?|expects?|requires?|sends?|stores?|keeps?|raises?|accepts?))\b",
    re.IGNORECASE)
# Not assertions of a change: questions are cut by "?"; these open proposals, hypotheses and conditionals,
# or diagnose a problem ("the issue is that it loads X instead of Y" describes a symptom, not a decision).
_TENTATIVE = re.compile(
    r"^\W*(?:if|when|whether|should|could|would|shall|can|maybe|perhaps|let me|let's|let us|try|what if|"
    r"do we|does it|is it|are we|how about|why)\b|\b(?:let me try|i'll try|we could|you could|might|"
    r"would be|should we|could we|or should|issue|problem|bug|error|cause|because|fails?|failing|broken|"
    r"wrong)\b",
    re.IGNORECASE)
# A change that names what was replaced ("changed from X", "instead of X", "replaced X with"): X.
_ARTICLE = r"(?:the\s+|a\s+|an\s+|our\s+|its\s+)?[`'\"]?"
_VALUE = r"([^\s`'\",;:)]+)"
_REPLACED = re.compile(
    rf"\b(?:changed|switched|migrated|moved|renamed|converted)\s+(?:it\s+|over\s+)?from\s+{_ARTICLE}{_VALUE}"
    rf"|\binstead of\s+{_ARTICLE}{_VALUE}|\breplaced\s+{_ARTICLE}{_VALUE}\s+(?:with|by)\b"
    r"|\bnot\s+`([^`]+)`", re.IGNORECASE)  # a correction taken back: "… is `total` again, not `total_cents`"
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_IDENTIFIER = re.compile(
    r"(?<![\w/.-])("
    r"[\w.-]*\w/[\w./-]*\w"  # a path
    r"|\w[\w-]*\.[A-Za-z][A-Za-z0-9]{0,5}"  # file.ext, module.attr
    r"|[A-Za-z]\w*_\w+"  # snake_case
    r"|[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*"  # camelCase, CamelCase
    r"|\w+\(\)"  # call()
    r")(?![\w])")
_NOT_SUBJECTS = frozenset({"e.g", "i.e", "etc", "vs", "e.g.", "i.e."})


def subjects(text: str, entities: list[str] | tuple[str, ...] = ()) -> set[str]:
    """The code-shaped names a text mentions, lower-cased, each path also by its last part."""
    found: set[str] = set()
    for raw in [*_BACKTICK.findall(text), *_IDENTIFIER.findall(text), *entities]:
        name = raw.strip().strip(".,:;()'\"").lower()
        if len(name) < 3 or name in _NOT_SUBJECTS or name.replace(".", "").isdigit():
            continue
        found.add(name)
        tail = name.rstrip("/").rpartition("/")[2]
        if tail and tail != name and len(tail) >= 3:
            found.add(tail)
    return found


def stated_change(newer: str, older_subjects: set[str], older_text: str | None = None) -> str | None:
    """The sentence of `newer` that asserts a change about one of `older_subjects`, or None. When the
    sentence names what was replaced ("changed from 3.6", "instead of ScriptProcessor") and `older_text` is
    given, the older must mention that: a change away from something it never said does not outdate it."""
    if not older_subjects:
        return None
    for sentence in _SENTENCE.split(newer):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?") or not _CHANGE.search(sentence) or _TENTATIVE.search(sentence):
            continue
        if not subjects(sentence) & older_subjects:
            continue
        replaced = _REPLACED.search(sentence)
        last_cue = max(m.start() for m in _CHANGE.finditer(sentence))
        if not replaced and not subjects(sentence[:last_cue]) & older_subjects:
            # What changed comes before the cue ("the recorder now uses X"); what follows is the new value.
            # An older memory that shares only the new value proposed or used that very thing: still true.
            continue
        if older_text is not None and replaced:
            value = next(v for v in replaced.groups() if v).rstrip(".").lower()
            if value not in older_text.lower():
                continue
        return sentence
    return None


@dataclass(frozen=True)
class Change:
    old_id: str
    new_id: str
    at: int  # when the newer episode was said: the older one's valid_to
    sentence: str


def _ordered(a: Episode, b: Episode) -> tuple[Episode, Episode] | None:
    """(older, newer) when one may supersede the other at all."""
    if a.created_at == b.created_at or a.project is None or a.project != b.project:
        return None
    if a.scope != "project" or b.scope != "project":
        return None
    older, newer = (a, b) if a.created_at < b.created_at else (b, a)
    if older.status != "active" or newer.status not in ("active", "superseded"):
        return None
    if older.kind in STANDING and newer.kind not in STANDING:
        return None
    return older, newer


def detect(conn: apsw.Connection, index: VectorIndex, new_rowids: list[int], threshold: float) -> list[Change]:
    """The supersessions the episodes just written bring about, in either direction (a backfill may write a
    session after a later one): at most one successor per older episode, the earliest."""
    if not new_rowids:
        return []
    index.refresh(conn)
    if len(index) < 2:
        return []
    new = sql.episodes_by_rowid(conn, new_rowids)
    vectors = index.vectors(list(new))
    if not vectors:
        return []
    rowids = list(vectors)
    neighbours = index.top_many(np.vstack([vectors[r] for r in rowids]), NEIGHBOURS + 1)
    wanted = {n for found in neighbours for n, cos in found if cos >= threshold}
    others = sql.episodes_by_rowid(conn, [r for r in wanted if r not in new])
    others.update(new)
    best: dict[str, Change] = {}
    subject_cache: dict[str, set[str]] = {}
    rounds: dict[str, int | None] = {}

    def same_round(a: Episode, b: Episode) -> bool:
        """Two pieces of one round: one piece of work, whose later steps replace its earlier tries."""
        if a.session_id != b.session_id or not a.source_uuids or not b.source_uuids:
            return False
        for ep in (a, b):
            if ep.id not in rounds:
                rounds[ep.id] = sessions_sql.round_of(conn, ep.source_uuids[0])
        return rounds[a.id] is not None and rounds[a.id] == rounds[b.id]

    def subjects_of(ep: Episode) -> set[str]:
        if ep.id not in subject_cache:
            subject_cache[ep.id] = subjects(ep.full_content, ep.entities)
        return subject_cache[ep.id]

    for rowid, found in zip(rowids, neighbours, strict=True):
        ep = new[rowid]
        for other_rowid, cos in found:
            other = others.get(other_rowid)
            if other is None or other_rowid == rowid or cos < threshold:
                continue
            pair = _ordered(ep, other)
            if pair is None:
                continue
            older, newer = pair
            if same_round(older, newer):
                continue
            sentence = stated_change(newer.full_content, subjects_of(older), older.full_content)
            if sentence is None:
                continue
            current = best.get(older.id)
            if current is None or newer.created_at < current.at:
                best[older.id] = Change(older.id, newer.id, newer.created_at, sentence)
    return list(best.values())


def apply(conn: apsw.Connection, changes: list[Change], now_ms: int) -> int:
    """Mark each older episode superseded (if still active), with its reason recorded; returns how many."""
    if not changes:
        return 0
    done = 0
    with write_transaction(conn):
        for change in changes:
            if not sql.active_ids(conn, [change.old_id]):
                continue  # forgotten, archived or superseded meanwhile
            cold_sql.supersede_into(conn, [change.old_id], change.new_id, change.at)
            cold_sql.record_action(conn, now_ms, JOB_TYPE, "superseded", episode_id=change.old_id,
                                   detail=f"by {change.new_id}: {change.sentence[:300]}")
            done += 1
    return done
