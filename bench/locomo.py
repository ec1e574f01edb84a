"""LoCoMo evidence recall through Engram's real capture -> episode -> search pipeline.

    python bench/locomo.py PATH [--conversations N] [--models-dir DIR] [--misses FILE] [--speaker-names] [--json]

PATH is any LoCoMo-format JSON file (a list of samples, each with `conversation`
holding speaker_a/speaker_b, session_<n> turn lists and session_<n>_date_time,
and `qa` with question/category/evidence). Dev data: ../shared/bench/locomo-dev.json.

Each LoCoMo session is written as one Claude Code transcript (a LoCoMo session is
one sitting on one date, like a Claude Code session): speaker_a is the user,
speaker_b the assistant, the message uuid is "<sample_id>:<dia_id>" (uuids are
unique store-wide), timestamps start at the session date, 30 s apart. Image turns
get their BLIP caption as "[image: caption]". All sessions of one conversation
share the cwd /locomo/<sample_id>, so each conversation is one Engram project.
The transcripts go through the real capture (backfill + Tailer) and episode
builder (Episodizer.episodize, final=True) into a temporary Engram home; then
every category 1-4 question is asked through EpisodeStore.search (what
memory_recall uses, without touching access counts), scoped to its
conversation's project. One search with limit 10 gives @3/@5/@10: the ranking is
the same for any limit up to the re-rank pool (20).

Recall@k is the mean over questions of the share of a question's evidence dia_ids
covered by the source uuids of the top-k results. Evidence ids are read leniently
("D8:6; D9:17" is two ids, "D:11:26" is D11:26); ids that cannot be parsed or name
no turn of the conversation are listed in data_stats and left out of the
denominator, and questions left with no evidence are not scored.

Baselines from the same run, over the turns of the question's conversation, each
turn a document "speaker: text": BM25 (an in-memory SQLite FTS5 table per
conversation, tokenizer porter unicode61 like Engram's, query terms from Engram's
fts_query), cosine top-k with the same embedder, and their RRF fusion (k=60).
A turn result covers one dia_id; an episode covers its round (about two turns).

tokens_per_result: mean estimate_tokens(full_content) of the episodes returned at
k=5 (speaker labels included); tokens_per_turn: the mean turn as a turn baseline
returns it ("speaker: text"); tokens_per_turn_text: without the speaker;
bite_tokens: the returned episodes' summaries (what memory_recall shows).
Goal: recall@5 >= 0.60 at tokens_per_result_vs_turn <= 2.

--speaker-names is a diagnostic, off by default: each message's text starts with
"Name: ", which Claude Code transcripts never carry (they have roles, not names),
but LoCoMo questions name the speaker.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.testbed.transcripts import assistant_line, user_line  # noqa: E402
from processor.capture.backfill import backfill  # noqa: E402
from processor.capture.claude import ClaudeFormat, encoded_project_dir  # noqa: E402
from processor.capture.tailer import Tailer  # noqa: E402
from processor.config import load_settings  # noqa: E402
from processor.memory.embedder import Embedder, load_embedder  # noqa: E402
from processor.memory.episode_store import EpisodeStore  # noqa: E402
from processor.memory.episodize import Episodizer  # noqa: E402
from processor.memory.search import fts_query  # noqa: E402
from processor.memory.verbatim import estimate_tokens  # noqa: E402
from processor.store import open_store  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo-dev.json"
DEFAULT_MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-bench" / "models"
CATEGORIES = (1, 2, 3, 4)
KS = (3, 5, 10)
GOAL_RECALL_AT_5 = 0.60
GOAL_TOKENS_VS_TURN = 2.0
RRF_K = 60
TURN_GAP = timedelta(seconds=30)
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%d %B %Y")


# --- the LoCoMo file ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    number: int
    started: datetime
    turns: list[Turn]


@dataclass(frozen=True)
class Question:
    sample_id: str
    index: int
    text: str
    category: int
    evidence: list[str]  # parsed ids that name a turn of the conversation
    unparseable: list[str]  # evidence strings with no D<session>:<turn> in them
    unknown: list[str]  # parsed ids that name no turn of the conversation


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[Question] = field(default_factory=list)
    skipped_questions: int = 0  # categories outside 1-4

    @property
    def cwd(self) -> str:
        return f"/locomo/{self.sample_id}"

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def _session_date(raw: object, number: int) -> datetime:
    text = " ".join(str(raw or "").split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    # An unreadable date still needs an order: one day per session from a fixed origin.
    return datetime(2000, 1, 1, tzinfo=UTC) + timedelta(days=number)


def _turn_text(raw: dict) -> str:
    text = str(raw.get("text") or "").strip()
    caption = raw.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [image: {caption.strip()}]".strip()
    return text


def parse_evidence(raw: Iterable[object], known: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(ids naming a known turn, strings with no id in them, ids naming no turn), each without duplicates."""
    valid: list[str] = []
    unparseable: list[str] = []
    unknown: list[str] = []
    for item in raw:
        found = [f"D{s}:{t}" for s, t in _EVIDENCE.findall(str(item).replace(" ", ""))]
        if not found:
            unparseable.append(str(item))
        for dia_id in found:
            target = valid if dia_id in known else unknown
            if dia_id not in target:
                target.append(dia_id)
    return valid, unparseable, unknown


def load_locomo(path: Path, limit: int | None = None, speaker_names: bool = False) -> list[Conversation]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):  # a single sample
        data = [data]
    conversations = []
    for number, sample in enumerate(data[:limit] if limit else data):
        conv = sample["conversation"]
        sample_id = str(sample.get("sample_id") or f"sample-{number}")
        speaker_a, speaker_b = str(conv.get("speaker_a", "")), str(conv.get("speaker_b", ""))
        sessions = []
        for key, turns in conv.items():
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(turns, list) or not turns:
                continue
            n = int(match.group(1))
            sessions.append(Session(n, _session_date(conv.get(f"{key}_date_time"), n), [
                Turn(str(t["dia_id"]), str(t.get("speaker", "")), _turn_text(t)) for t in turns
                if isinstance(t, dict) and t.get("dia_id") and _turn_text(t)
            ]))
        if speaker_names:
            for s in sessions:
                s.turns[:] = [Turn(t.dia_id, t.speaker, f"{t.speaker}: {t.text}") for t in s.turns]
        sessions.sort(key=lambda s: s.number)
        c = Conversation(sample_id, speaker_a, speaker_b, sessions)
        known = {t.dia_id for t in c.turns}
        for index, qa in enumerate(sample.get("qa", [])):
            try:
                category = int(qa.get("category"))
            except (TypeError, ValueError):
                category = 0
            if category not in CATEGORIES:
                c.skipped_questions += 1
                continue
            valid, unparseable, unknown = parse_evidence(qa.get("evidence") or [], known)
            c.questions.append(Question(sample_id, index, str(qa.get("question", "")), category, valid,
                                        unparseable, unknown))
        conversations.append(c)
    return conversations


# --- LoCoMo sessions as Claude Code transcripts ---------------------------------------------------

def session_uuid(sample_id: str, number: int) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"locomo/{sample_id}/session_{number}"))


def message_uuid(sample_id: str, dia_id: str) -> str:
    return f"{sample_id}:{dia_id}"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def write_transcripts(conversations: list[Conversation], root: Path) -> int:
    """One <root>/<encoded cwd>/<session uuid>.jsonl per LoCoMo session; returns the number of files."""
    files = 0
    for c in conversations:
        folder = root / encoded_project_dir(Path(c.cwd))
        folder.mkdir(parents=True, exist_ok=True)
        for s in c.sessions:
            sid = session_uuid(c.sample_id, s.number)
            lines, parent = [], None
            for i, turn in enumerate(s.turns):
                uid = message_uuid(c.sample_id, turn.dia_id)
                stamp = _iso(s.started + i * TURN_GAP)
                if turn.speaker == c.speaker_b:
                    lines.append(assistant_line(turn.text, session_id=sid, message_id=f"msg_{uid}", uid=uid,
                                                cwd=c.cwd, timestamp=stamp, parentUuid=parent))
                else:  # speaker_a, or a speaker the header does not name: the user
                    lines.append(user_line(turn.text, session_id=sid, uid=uid, cwd=c.cwd, parent=parent,
                                           timestamp=stamp))
                parent = uid
            (folder / f"{sid}.jsonl").write_text("".join(lines), encoding="utf-8")
            files += 1
    return files


# --- scoring ------------------------------------------------------------------------------------

Ranking = list[frozenset[str]]  # per result, best first: the dia_ids it covers


def recall_at(evidence: list[str], ranking: Ranking, k: int) -> float:
    covered = set().union(*ranking[:k]) if ranking else set()
    return sum(1 for e in evidence if e in covered) / len(evidence)


def mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarize_system(questions: list[Question], rankings: dict[tuple[str, int], Ranking]) -> dict:
    out: dict = {f"recall@{k}": round(mean(recall_at(q.evidence, rankings[(q.sample_id, q.index)], k)
                                           for q in questions), 4) for k in KS}
    by_category = {}
    for cat in CATEGORIES:
        qs = [q for q in questions if q.category == cat]
        if qs:
            by_category[str(cat)] = {"questions": len(qs), **{
                f"recall@{k}": round(mean(recall_at(q.evidence, rankings[(q.sample_id, q.index)], k) for q in qs), 4)
                for k in KS}}
    out["by_category"] = by_category
    return out


# --- Engram -------------------------------------------------------------------------------------

@dataclass
class EngramRun:
    rankings: dict[tuple[str, int], Ranking]
    returned_tokens: list[int]  # full_content tokens of every episode returned at k=5
    returned_bite_tokens: list[int]
    returned_turns: list[int]
    search_ms: list[float]
    stats: dict
    timings: dict


def run_engram(conversations: list[Conversation], workdir: Path, embedder: Embedder) -> EngramRun:
    timings = {}
    projects = workdir / "projects"
    home = workdir / "engram-home"
    home.mkdir()
    started = time.perf_counter()
    files = write_transcripts(conversations, projects)
    timings["write_transcripts"] = time.perf_counter() - started

    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_PROJECTS_DIR"}
    env["ENGRAM_HOME"] = str(home)
    settings = load_settings(env)
    conn = open_store(settings.db_path)
    started = time.perf_counter()
    report = backfill(Tailer(conn), ClaudeFormat(projects), since_days=None)
    timings["capture"] = time.perf_counter() - started

    store = EpisodeStore(settings, conn, embedder=embedder)
    started = time.perf_counter()
    episodes = Episodizer(store).episodize(final=True)
    timings["episodize_and_embed"] = time.perf_counter() - started

    rows = conn.execute("SELECT summary, full_content, source_uuids FROM episodes").fetchall()
    stats = {
        "transcripts": files, "messages": report.messages, "capture_problems": report.problems,
        "episodes": episodes,
        "split_pieces": sum(1 for r in rows if r[0].startswith("(cont.")),
        "episode_tokens_mean": round(mean(estimate_tokens(r[1]) for r in rows), 1),
        "episode_turns_mean": round(mean(len(json.loads(r[2])) for r in rows), 2),
        "settings": {name: settings.values[name] for name in (
            "verbatim_max_chars", "bm25_share", "weight_relevance", "weight_recency", "weight_frequency",
            "recency_half_life_days", "embedding_model")},
    }

    rankings: dict[tuple[str, int], Ranking] = {}
    tokens, bites, turns, latencies = [], [], [], []
    started = time.perf_counter()
    for c in conversations:
        prefix = f"{c.sample_id}:"
        for q in c.questions:
            t0 = time.perf_counter()
            results = store.search(q.text, limit=max(KS), project=c.cwd)
            latencies.append((time.perf_counter() - t0) * 1000)
            rankings[(q.sample_id, q.index)] = [
                frozenset(u[len(prefix):] for u in s.episode.source_uuids if u.startswith(prefix)) for s in results]
            for s in results[:5]:
                tokens.append(estimate_tokens(s.episode.full_content))
                bites.append(estimate_tokens(s.episode.summary))
                turns.append(len(s.episode.source_uuids))
    timings["engram_search"] = time.perf_counter() - started
    conn.close()
    return EngramRun(rankings, tokens, bites, turns, latencies, stats, timings)


# --- turn-level baselines -----------------------------------------------------------------------

def turn_document(turn: Turn) -> str:
    prefix = f"{turn.speaker}: "
    return turn.text if turn.text.startswith(prefix) else prefix + turn.text


def bm25_rankings(c: Conversation, limit: int) -> dict[int, list[str]]:
    """Question index -> dia_ids best first, by FTS5 bm25 over this conversation's turns."""
    db = apsw.Connection(":memory:")
    db.execute("CREATE VIRTUAL TABLE turns USING fts5(dia_id UNINDEXED, body, tokenize='porter unicode61')")
    with db:
        db.executemany("INSERT INTO turns (dia_id, body) VALUES (?, ?)",
                       [(t.dia_id, turn_document(t)) for t in c.turns])
    out = {}
    for q in c.questions:
        match = fts_query(q.text)
        out[q.index] = [r[0] for r in db.execute(
            "SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?", (match, limit))
        ] if match else []
    db.close()
    return out


def vector_rankings(c: Conversation, embedder: Embedder, query_vectors: dict[int, np.ndarray],
                    limit: int) -> dict[int, list[str]]:
    turns = c.turns
    matrix = embedder.embed_documents([turn_document(t) for t in turns])
    out = {}
    for q in c.questions:
        sims = matrix @ query_vectors[q.index]
        k = min(limit, len(turns))
        best = np.argpartition(-sims, k - 1)[:k] if k < len(turns) else np.arange(len(turns))
        out[q.index] = [turns[i].dia_id for i in best[np.argsort(-sims[best])]]
    return out


def rrf(*rankings: list[str], k: int = RRF_K) -> list[str]:
    score: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            score[item] += 1.0 / (k + rank + 1)
    return sorted(score, key=lambda item: -score[item])


def run_baselines(conversations: list[Conversation], embedder: Embedder) -> tuple[dict, dict]:
    ranked: dict[str, dict[tuple[str, int], Ranking]] = {"bm25": {}, "vector": {}, "hybrid": {}}
    timings = {"baseline_bm25": 0.0, "baseline_vector": 0.0}
    depth = 100  # how far each list goes before fusion
    for c in conversations:
        started = time.perf_counter()
        lexical = bm25_rankings(c, depth)
        timings["baseline_bm25"] += time.perf_counter() - started
        started = time.perf_counter()
        vectors = {q.index: embedder.embed_query(q.text) for q in c.questions}
        cosine = vector_rankings(c, embedder, vectors, depth)
        timings["baseline_vector"] += time.perf_counter() - started
        for q in c.questions:
            key = (c.sample_id, q.index)
            ranked["bm25"][key] = [frozenset([d]) for d in lexical[q.index]]
            ranked["vector"][key] = [frozenset([d]) for d in cosine[q.index]]
            ranked["hybrid"][key] = [frozenset([d]) for d in rrf(lexical[q.index], cosine[q.index])]
    return ranked, timings


# --- the report ---------------------------------------------------------------------------------

def evidence_stats(conversations: list[Conversation]) -> dict:
    questions = [q for c in conversations for q in c.questions]
    return {
        "conversations": len(conversations),
        "sessions": sum(len(c.sessions) for c in conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "questions_total": sum(len(c.questions) + c.skipped_questions for c in conversations),
        "questions_category_1_4": len(questions),
        "questions_without_usable_evidence": sum(1 for q in questions if not q.evidence),
        "evidence_ids_scored": sum(len(q.evidence) for q in questions),
        "evidence_unparseable": sorted({e for q in questions for e in q.unparseable}),
        "evidence_naming_no_turn": sorted({f"{q.sample_id}:{e}" for q in questions for e in q.unknown}),
    }


def write_misses(path: Path, conversations: list[Conversation], engram: EngramRun,
                 baselines: dict[str, dict[tuple[str, int], Ranking]], k: int = 5) -> int:
    """JSON lines, one per question whose evidence Engram's top-k missed in part, for investigation."""
    text = {(c.sample_id, t.dia_id): turn_document(t) for c in conversations for t in c.turns}
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for c in conversations:
            for q in c.questions:
                key = (q.sample_id, q.index)
                if not q.evidence or recall_at(q.evidence, engram.rankings[key], k) == 1.0:
                    continue
                covered = set().union(*engram.rankings[key][:k]) if engram.rankings[key] else set()
                f.write(json.dumps({
                    "sample_id": q.sample_id, "question": q.text, "category": q.category,
                    "missed": {e: text.get((q.sample_id, e), "") for e in q.evidence if e not in covered},
                    "engram_top": [sorted(r) for r in engram.rankings[key][:k]],
                    **{f"{name}_hit": recall_at(q.evidence, r[key], k) for name, r in baselines.items()},
                }) + "\n")
                written += 1
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_DATA, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS,
                        help="where the converted embedding model is cached between runs")
    parser.add_argument("--misses", type=Path, default=None, help="write Engram's partial misses at k=5 here")
    parser.add_argument("--speaker-names", action="store_true",
                        help="diagnostic: start each message with its speaker's name (Claude Code never does)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started_all = time.perf_counter()
    conversations = load_locomo(args.path, args.conversations, args.speaker_names)
    questions = [q for c in conversations for q in c.questions if q.evidence]
    settings = load_settings()
    started = time.perf_counter()
    embedder = load_embedder(settings.embedding_model, args.models_dir)
    load_seconds = time.perf_counter() - started

    with tempfile.TemporaryDirectory(prefix="engram-locomo-") as tmp:
        engram = run_engram(conversations, Path(tmp), embedder)
    baselines, baseline_timings = run_baselines(conversations, embedder)

    all_turns = [t for c in conversations for t in c.turns]
    turn_tokens = mean(estimate_tokens(turn_document(t)) for t in all_turns)
    turn_text_tokens = mean(estimate_tokens(t.text.removeprefix(f"{t.speaker}: ")) for t in all_turns)
    tokens_per_result = mean(engram.returned_tokens)
    result = summarize_system(questions, engram.rankings)
    systems = {name: summarize_system(questions, r) for name, r in baselines.items()}
    timings = {"load_embedder": load_seconds, **engram.timings, **baseline_timings,
               "total": time.perf_counter() - started_all}
    report = {
        "benchmark": "locomo", "data": str(args.path), "embedding_model": embedder.model_id,
        "questions": len(questions),
        **{key: result[key] for key in ("recall@3", "recall@5", "recall@10")},
        **{f"{name}_recall@{k}": systems[name][f"recall@{k}"] for name in systems for k in KS},
        "tokens_per_result": round(tokens_per_result, 1),
        "tokens_per_turn": round(turn_tokens, 1),
        "tokens_per_result_vs_turn": round(tokens_per_result / turn_tokens, 2) if turn_tokens else None,
        "tokens_per_turn_text": round(turn_text_tokens, 1),
        "tokens_per_result_vs_turn_text": round(tokens_per_result / turn_text_tokens, 2) if turn_text_tokens else None,
        "bite_tokens": round(mean(engram.returned_bite_tokens), 1),
        "turns_per_result": round(mean(engram.returned_turns), 2),
        "by_category": {"engram": result["by_category"], **{n: s["by_category"] for n, s in systems.items()}},
        "search_ms_p50": round(percentile(engram.search_ms, 50), 2),
        "search_ms_p95": round(percentile(engram.search_ms, 95), 2),
        "goal": {"recall@5": GOAL_RECALL_AT_5, "tokens_per_result_vs_turn": GOAL_TOKENS_VS_TURN},
        "speaker_names": args.speaker_names,
        "data_stats": evidence_stats(conversations),
        "pipeline": engram.stats,
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }
    if args.misses:
        report["misses_written"] = write_misses(args.misses, conversations, engram, baselines)

    print(f"LoCoMo {args.path.name}: {report['data_stats']['conversations']} conversations, "
          f"{report['data_stats']['turns']} turns, {len(questions)} questions (categories 1-4 with evidence)")
    print(f"{'system':>10}  {'R@3':>6} {'R@5':>6} {'R@10':>6}   per category R@5 (1/2/3/4)")
    for name, s in (("engram", result), *systems.items()):
        cats = " / ".join(f"{s['by_category'][c]['recall@5']:.3f}" for c in s["by_category"])
        print(f"{name:>10}  {s['recall@3']:6.3f} {s['recall@5']:6.3f} {s['recall@10']:6.3f}   {cats}")
    print(f"tokens per result {report['tokens_per_result']} = {report['tokens_per_result_vs_turn']}x a turn "
          f"({report['tokens_per_turn']}; {report['tokens_per_result_vs_turn_text']}x its text alone, "
          f"{report['tokens_per_turn_text']}); bite {report['bite_tokens']} tokens; "
          f"{report['turns_per_result']} turns per result (goal R@5 >= {GOAL_RECALL_AT_5}, <= 2x a turn)")
    print("seconds: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items()))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
