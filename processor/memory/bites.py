"""The bite of a recalled memory: the sentences of it that best answer the query, within BITE_TOKENS.

One function, ``bites_for``, makes the bites of every place a memory reaches the agent with a query:
the recollection file the PreToolUse hook injects, ``memory_recall`` / ``engram recall`` and the
viewer's search. Without a query (the SessionStart digest) the stored summary is the bite.

Scoring is lexical on purpose: BM25 over the sentences of the hits with the query's terms. It costs
well under a millisecond for a few hits, so the hot path (a user message → its recollection file)
never embeds sentences. The inverse document frequencies come from the hits' own sentences, so a
word every sentence shares (the project's name) says little and a rarer one decides.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

from processor.memory.pasted import PASTE_WEIGHT
from processor.memory.search import _STOPWORDS
from processor.memory.sentences import Unit, units
from processor.memory.verbatim import split_task_header
from processor.tokens import CHARS_PER_TOKEN, estimate_tokens

BITE_TOKENS = 45
BITE_CHARS = BITE_TOKENS * CHARS_PER_TOKEN
HEADER_CHARS = 48  # the task header's share of a bite, at most: the answer comes first
_SCAN_CHARS = 4_000  # of a memory's content: a verbatim piece is 500; a long manual memory is bitten from its head
_K1, _B = 1.2, 0.75
# A tool note names what was touched; it answers "which file" but rarely "why" or "how": it counts less.
_KIND_WEIGHT = {"sentence": 1.0, "item": 1.0, "code": 0.8, "tool": 0.5, "paste": PASTE_WEIGHT}
_WORD = re.compile(r"\w+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_NOTE = re.compile(r"\[tool: ([^\]\s]+)(?: ([^\]]*))?\]")
_SPEAKER = re.compile(r"^(?:user|assistant): ")
# An auto-memory section's summary opens with where it is stated (capture.automem.cite: "MEMORY.md § Build"):
# that stays in front of its bite, as a verbatim piece's task header does.
_CITE = re.compile(r"([^:\n§]{1,80} § [^:\n]{0,80}): ")


class Bitable(Protocol):
    """What a bite is made from: a memory's stored summary and its full content (an Episode is one)."""

    @property
    def summary(self) -> str: ...

    @property
    def full_content(self) -> str: ...


@dataclass(frozen=True)
class Passage:
    """A Bitable that is not a stored memory (a message of the current session)."""

    summary: str
    full_content: str


def _stem(word: str) -> str:
    """A light suffix strip, so "tests", "tested" and "testing" meet "test"; not a linguist's stemmer."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Content terms: lower-cased stems, identifiers also by their parts (webkitAudioContext → audio…),
    CJK runs as character pairs (those scripts put no spaces between words)."""
    return [t for word in _WORD.findall(text) for t in _word_terms(word)]


@lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> tuple[str, ...]:
    # Cached: words repeat (a session's vocabulary is small), so the hot path pays for each once.
    if _CJK.search(word):
        return tuple(word[i:i + 2] for i in range(max(len(word) - 1, 1)))
    lower = word.lower()
    if lower in _STOPWORDS or (len(lower) < 2 and not lower.isdigit()):
        return ()
    out = [_stem(lower)]
    parts = [p.lower() for p in _CAMEL.findall(word.replace("_", " ")) if len(p) > 2]
    if len(parts) > 1:
        out += [_stem(p) for p in parts if p not in _STOPWORDS]
    return tuple(out)


def _candidates(content: str) -> list[Unit]:
    body = _SPEAKER.sub("", content[:_SCAN_CHARS].replace("\nuser: ", "\n").replace("\nassistant: ", "\n"))
    return [replace(u, text=" ".join(u.text.split())) for u in units(body, BITE_CHARS * 4) if u.text.strip()]


def _scored_text(unit: Unit) -> str:
    """What of a unit counts for matching: a tool note by its tool and the file's name, not the folders
    above it (every path of a project shares them)."""
    if unit.kind != "tool":
        return unit.text
    return " ".join(_NOTE.sub(lambda m: f"{m.group(1)} {(m.group(2) or '').rsplit('/', 1)[-1]}", unit.text).split())


def _window(text: str, query: set[str], room: int) -> str:
    """The room-sized stretch of a long unit holding the most query terms, cut at spaces, marked with …."""
    words = text.split()
    if not words:
        return text[: room - 2]
    flags = [any(t in query for t in terms(w)) for w in words]
    sizes = [len(w) + 1 for w in words]
    # Two pointers: for each first word, the longest run that fits; keep the run with the most matches.
    best_begin, best_count, end, size, count = 0, -1, 0, 0, 0
    for begin in range(len(words)):
        if end < begin:
            end, size, count = begin, 0, 0
        while end < len(words) and size + sizes[end] <= room - 2:
            size += sizes[end]
            count += flags[end]
            end += 1
        if count > best_count:
            best_begin, best_count = begin, count
        if end > begin:
            size -= sizes[begin]
            count -= flags[begin]
    # Start a little before the first match, so the sentence's subject is not lost.
    first = next((i for i in range(best_begin, len(words)) if flags[i]), best_begin)
    begin = max(min(best_begin, first - 3), 0) if best_count > 0 else 0
    size, end = 0, begin
    while end < len(words) and size + sizes[end] <= room - 2:
        size += sizes[end]
        end += 1
    piece = " ".join(words[begin:end]) or text[: room - 2]
    return ("…" if begin > 0 else "") + piece + ("…" if end < len(words) else "")


def _introduces(text: str) -> bool:
    """A sentence that ends with a colon announces what follows it (a list, a command, the reason)."""
    return text.rstrip().endswith(":")


def fit(text: str, room: int) -> str:
    """text within room characters, cut at a space when one is near, with … when cut."""
    if len(text) <= room:
        return text
    cut = text[: room - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > room // 2 else cut).rstrip(" ,;:") + "…"


def _compose(header: str, chosen: list[tuple[int, str]], query: set[str]) -> str:
    """The chosen sentences in their order, then the task header in front when it still fits."""
    chosen.sort()
    parts: list[str] = []
    last = None
    for position, text in chosen:
        if parts and last is not None and position != last + 1:
            parts.append("…")
        parts.append(text)
        last = position
    body = " ".join(parts)
    if len(body) > BITE_CHARS:
        body = _window(body, query, BITE_CHARS)
    if header:
        room = BITE_CHARS - len(body) - 2
        if room >= 16:
            return f"{fit(header, min(room, HEADER_CHARS))}: {body}"
    return body


def bites_for(query: str | None, memories: Sequence[Bitable]) -> list[str]:
    """The bite of each memory for this query, in order; each at most BITE_TOKENS tokens.

    No query, or a memory none of whose sentences shares a term with it: the stored summary.
    """
    wanted = set(terms(query or ""))
    if not wanted:
        return [fit(m.summary, BITE_CHARS) for m in memories]
    parsed: list[tuple[str, list[Unit], list[Counter[str]]]] = []
    document_frequency: Counter[str] = Counter()
    for memory in memories:
        header, content = split_task_header(memory.full_content)
        if not header and (cited := _CITE.match(memory.summary)):
            header = cited.group(1)
        found = _candidates(content)
        counts = [Counter(t for t in terms(_scored_text(u)) if t in wanted) for u in found]
        for count in counts:
            document_frequency.update(count.keys())
        parsed.append((header, found, counts))
    documents = sum(len(found) for _, found, _ in parsed) or 1
    average = sum(len(u.text) for _, found, _ in parsed for u in found) / documents or 1.0
    idf = {t: math.log(1 + (documents - n + 0.5) / (n + 0.5)) for t, n in document_frequency.items()}

    out: list[str] = []
    for memory, (header, found, counts) in zip(memories, parsed, strict=True):
        scores = []
        for unit, count in zip(found, counts, strict=True):
            norm = _K1 * (1 - _B + _B * len(unit.text) / average)
            bm25 = sum(idf[t] * c * (_K1 + 1) / (c + norm) for t, c in count.items())
            scores.append(bm25 * _KIND_WEIGHT.get(unit.kind, 1.0))
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i])
        if not ranked:
            out.append(fit(memory.summary, BITE_CHARS))
            continue
        best = found[ranked[0]].text
        chosen = [(ranked[0], best if len(best) <= BITE_CHARS else _window(best, wanted, BITE_CHARS))]
        used = len(chosen[0][1])
        follow = ranked[0] + 1
        if _introduces(best) and follow < len(found) and found[follow].kind != "tool" and used < BITE_CHARS - 16:
            # "The tests failed because:" says what the answer is about; the unit after it is the answer.
            chosen.append((follow, fit(found[follow].text, BITE_CHARS - used - 3)))
            used += len(chosen[-1][1]) + 3
        for i in ranked[1:]:  # more answering sentences while they fit whole
            if any(i == position for position, _ in chosen):
                continue
            if used + len(found[i].text) + 3 <= BITE_CHARS:
                chosen.append((i, found[i].text))
                used += len(found[i].text) + 3
        bite = _compose(header, chosen, wanted)
        while estimate_tokens(bite) > BITE_TOKENS:  # never past the budget, whatever the joins added
            bite = fit(bite, len(bite) - CHARS_PER_TOKEN)
        out.append(bite)
    return out


def bite_for(query: str | None, memory: Bitable) -> str:
    """One memory's bite (see ``bites_for``, which scores several hits against each other)."""
    return bites_for(query, [memory])[0]
