"""How well Engram answers coding questions about real Claude Code sessions, against raw-line search.

    python bench/coding_qa.py [QA] [--projects-dir DIR] [--models-dir DIR] [--misses FILE] [--json]

QA is a JSON list of items {"id", "question", "kind", "answer", "evidence": [transcript line uuids],
"session", "evidence_text": [exact substrings of the evidence lines]}; dev data:
../shared/bench/coding-qa-dev.json over the transcripts in ../shared/fixtures/claude-projects.

Engram runs as a user runs it: a fresh ENGRAM_HOME (a temporary folder), the `engram backfill` pass
(Processor.run_once: capture, then episodes), then every question through EpisodeStore.recall — what
`engram recall` and the memory_recall MCP tool call — scoped to the project of the item's session (what
memory_recall does from that project). Results are read back from the store without touching them.

Scores, per item, for k in 1/3/5/10 (whitespace collapsed on both sides, case kept):
- recall@k: the share of the item's evidence_text strings found inside the full content of one of the
  top-k results (what memory_expand returns);
- bite_answer@k (k = 1, 3): the same share inside the top-k results' bites (the summary the recall
  list and the PreToolUse hook show).

Baselines, measured in the same run over the raw transcript lines of the same project (every user or
assistant line of the captured transcript files, its text blocks, tool inputs and tool results; one
document per line): BM25 (SQLite FTS5, porter unicode61, query terms from Engram's fts_query) and cosine
top-k with the same embedder. A baseline result's bite and content are the line itself.

Tokens (estimate_tokens, 4 characters a token): tokens_per_bite and tokens_per_result are the means over
the top-5 results of their bite and full content; tokens_per_line for the baselines' line documents.
Throughput: captured messages and built memories per second of the backfill pass (model load included).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import apsw
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.locomo import DEFAULT_MODELS, mean, percentile  # noqa: E402
from processor.capture.claude import ClaudeFormat, session_id_for  # noqa: E402
from processor.capture.discover import discover  # noqa: E402
from processor.config import load_settings  # noqa: E402
from processor.memory.embedder import Embedder, load_embedder  # noqa: E402
from processor.memory.episode_store import EpisodeStore  # noqa: E402
from processor.memory.gguf_convert import ensure_default_gguf  # noqa: E402
from processor.memory.search import fts_query  # noqa: E402
from processor.memory.verbatim import estimate_tokens  # noqa: E402
from processor.service.run_loop import Processor  # noqa: E402
from processor.store import episodes as episode_sql  # noqa: E402
from processor.store import open_store  # noqa: E402

DEFAULT_QA = REPO.parent / "shared" / "bench" / "coding-qa-dev.json"
DEFAULT_PROJECTS = REPO.parent / "shared" / "fixtures" / "claude-projects"
KS = (1, 3, 5, 10)
BITE_KS = (1, 3)
TOKENS_AT = 5
_WS = re.compile(r"\s+")


def flat(text: str) -> str:
    return _WS.sub(" ", text).strip()


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    kind: str
    session: str
    evidence_text: list[str]


@dataclass(frozen=True)
class Result:
    """One returned result, as the scorer sees it."""

    bite: str
    content: str


def load_items(path: Path) -> list[Item]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [Item(str(d["id"]), str(d["question"]), str(d.get("kind") or "other"), str(d.get("session") or ""),
                 [flat(t) for t in d.get("evidence_text") or [] if flat(str(t))]) for d in data]


def share_found(needles: list[str], haystacks: list[str]) -> float:
    joined = [flat(h) for h in haystacks]
    return sum(1 for n in needles if any(n in h for h in joined)) / len(needles) if needles else 0.0


def score(items: list[Item], results: dict[str, list[Result]]) -> dict:
    def measures(subset: list[Item]) -> dict:
        out = {"items": len(subset)}
        for k in KS:
            out[f"recall@{k}"] = round(mean(share_found(i.evidence_text, [r.content for r in results[i.id][:k]])
                                            for i in subset), 4)
        for k in BITE_KS:
            out[f"bite_answer@{k}"] = round(mean(share_found(i.evidence_text, [r.bite for r in results[i.id][:k]])
                                                 for i in subset), 4)
        returned = [r for i in subset for r in results[i.id][:TOKENS_AT]]
        out["tokens_per_bite"] = round(mean(estimate_tokens(r.bite) for r in returned), 1)
        out["tokens_per_result"] = round(mean(estimate_tokens(r.content) for r in returned), 1)
        return out

    scored = [i for i in items if i.evidence_text]
    report = measures(scored)
    report["by_kind"] = {kind: measures([i for i in scored if i.kind == kind])
                         for kind in sorted({i.kind for i in scored})}
    return report


# --- Engram, as `engram backfill` + `engram recall` run it ---------------------------------------

@dataclass
class EngramRun:
    results: dict[str, list[Result]]
    projects: dict[str, str | None]  # session id -> Engram project
    recall_ms: list[float]
    stats: dict


def run_engram(items: list[Item], projects_dir: Path, home: Path, models_dir: Path,
               embedder: Embedder) -> EngramRun:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(projects_dir), ENGRAM_MODELS_DIR=str(models_dir))
    settings = load_settings(env)
    started = time.perf_counter()
    report, memories = Processor(settings).run_once(None)
    backfill_seconds = time.perf_counter() - started

    conn = open_store(settings.db_path)
    projects = dict(conn.execute("SELECT session_id, project FROM sessions").fetchall())
    store = EpisodeStore(settings, conn, embedder=embedder)
    results: dict[str, list[Result]] = {}
    latencies = []
    for item in items:
        started = time.perf_counter()
        hits = store.recall(item.question, limit=max(KS), project=projects.get(item.session))
        latencies.append((time.perf_counter() - started) * 1000)
        found = []
        for hit in hits:
            ep = episode_sql.get_episode(conn, hit.id) if hit.source == "episode" else None
            found.append(Result(hit.bite, ep.full_content if ep else hit.bite))
        results[item.id] = found
    kinds = dict(conn.execute("SELECT kind, count(*) FROM episodes GROUP BY kind").fetchall())
    conn.close()
    stats = {
        "transcripts": report.files, "lines": report.lines, "messages": report.messages,
        "capture_problems": report.problems, "memories": memories, "memories_by_kind": kinds,
        "backfill_seconds": round(backfill_seconds, 2),
        "messages_per_second": round(report.messages / backfill_seconds, 1) if backfill_seconds else None,
        "memories_per_second": round(memories / backfill_seconds, 1) if backfill_seconds else None,
    }
    return EngramRun(results, projects, latencies, stats)


# --- raw-line baselines ------------------------------------------------------------------------

def _strings(value: object) -> list[str]:
    """Every text a content block carries: text, tool inputs (as JSON) and tool results."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if not isinstance(value, dict):
        return []
    kind = value.get("type")
    if kind == "text":
        return _strings(value.get("text"))
    if kind == "tool_use":
        return [f"[tool: {value.get('name')}] {json.dumps(value.get('input'), ensure_ascii=False)}"]
    if kind == "tool_result":
        return _strings(value.get("content"))
    return []


def raw_lines(projects_dir: Path) -> list[tuple[str, str]]:
    """(session id, document) for every user/assistant line with text, of every captured transcript."""
    docs = []
    for path in discover(projects_dir, ClaudeFormat(projects_dir), None):
        session = session_id_for(path)
        for raw in path.read_bytes().splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
                continue
            message = entry.get("message")
            text = "\n".join(_strings(message.get("content"))) if isinstance(message, dict) else ""
            if text.strip():
                docs.append((session, f"{entry['type']}: {text}"))
    return docs


def run_baselines(items: list[Item], docs: list[tuple[str, str]], projects: dict[str, str | None],
                  embedder: Embedder) -> tuple[dict[str, dict[str, list[Result]]], dict]:
    timings = {}
    started = time.perf_counter()
    db = apsw.Connection(":memory:")
    db.execute("CREATE VIRTUAL TABLE lines USING fts5(project UNINDEXED, body, tokenize='porter unicode61')")
    with db:
        db.executemany("INSERT INTO lines (rowid, project, body) VALUES (?, ?, ?)",
                       [(n, projects.get(s) or "", body) for n, (s, body) in enumerate(docs)])
    bm25: dict[str, list[Result]] = {}
    for item in items:
        match = fts_query(item.question)
        rows = db.execute(
            "SELECT rowid FROM lines WHERE lines MATCH ? AND project = ? ORDER BY bm25(lines) LIMIT ?",
            (match, projects.get(item.session) or "", max(KS))).fetchall() if match else []
        bm25[item.id] = [Result(docs[r][1], docs[r][1]) for (r,) in rows]
    db.close()
    timings["baseline_bm25"] = time.perf_counter() - started

    started = time.perf_counter()
    matrix = embedder.embed_documents([body for _, body in docs])
    project_of = np.array([projects.get(s) or "" for s, _ in docs], dtype=object)
    cosine: dict[str, list[Result]] = {}
    for item in items:
        sims = matrix @ embedder.embed_query(item.question)
        sims = np.where(project_of == (projects.get(item.session) or ""), sims, -np.inf)
        best = np.argsort(-sims)[:max(KS)]
        cosine[item.id] = [Result(docs[i][1], docs[i][1]) for i in best if np.isfinite(sims[i])]
    timings["baseline_cosine"] = time.perf_counter() - started
    return {"bm25": bm25, "cosine": cosine}, timings


def write_misses(path: Path, items: list[Item], engram: EngramRun, k: int = 5) -> int:
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for item in items:
            results = engram.results[item.id]
            if share_found(item.evidence_text, [r.content for r in results[:k]]) == 1.0:
                continue
            f.write(json.dumps({"id": item.id, "kind": item.kind, "question": item.question,
                                "evidence_text": item.evidence_text,
                                "top_bites": [r.bite for r in results[:k]]}) + "\n")
            written += 1
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("qa", nargs="?", type=Path, default=DEFAULT_QA, help="a coding-QA JSON file")
    parser.add_argument("--projects-dir", type=Path, default=DEFAULT_PROJECTS, help="the transcripts root")
    parser.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS,
                        help="where the converted embedding model is cached between runs")
    parser.add_argument("--misses", type=Path, default=None, help="write the items Engram's top 5 missed here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started_all = time.perf_counter()
    items = load_items(args.qa)
    ensure_default_gguf(args.models_dir)  # converted once, outside the timed backfill
    settings = load_settings()
    embedder = load_embedder(settings.embedding_model, args.models_dir)
    with tempfile.TemporaryDirectory(prefix="engram-coding-qa-") as tmp:
        engram = run_engram(items, args.projects_dir, Path(tmp) / "home", args.models_dir, embedder)
        docs = raw_lines(args.projects_dir)
        baselines, timings = run_baselines(items, docs, engram.projects, embedder)

    systems = {"engram": score(items, engram.results), **{n: score(items, r) for n, r in baselines.items()}}
    main_keys = [f"recall@{k}" for k in KS] + [f"bite_answer@{k}" for k in BITE_KS] + [
        "tokens_per_bite", "tokens_per_result"]
    report = {
        "benchmark": "coding_qa", "data": str(args.qa), "projects_dir": str(args.projects_dir),
        "embedding_model": embedder.model_id, "items": systems["engram"]["items"],
        **{key: systems["engram"][key] for key in main_keys},
        **{f"{name}_{key}": systems[name][key] for name in baselines for key in main_keys},
        "tokens_per_line": round(mean(estimate_tokens(body) for _, body in docs), 1),
        "by_kind": {name: s["by_kind"] for name, s in systems.items()},
        "backfill": engram.stats,
        "recall_ms_p50": round(percentile(engram.recall_ms, 50), 2),
        "recall_ms_p95": round(percentile(engram.recall_ms, 95), 2),
        "baseline_lines": len(docs),
        "seconds": {**{k: round(v, 2) for k, v in timings.items()},
                    "total": round(time.perf_counter() - started_all, 2)},
    }
    if args.misses:
        report["misses_written"] = write_misses(args.misses, items, engram)

    print(f"coding QA {args.qa.name}: {report['items']} items; backfill {engram.stats['messages']} messages, "
          f"{engram.stats['memories']} memories in {engram.stats['backfill_seconds']} s "
          f"({engram.stats['messages_per_second']} messages/s, {engram.stats['memories_per_second']} memories/s)")
    print(f"{'system':>8}  {'R@1':>6} {'R@3':>6} {'R@5':>6} {'R@10':>6}  {'bite@1':>6} {'bite@3':>6}  "
          f"{'tok/bite':>8} {'tok/result':>10}")
    for name, s in systems.items():
        print(f"{name:>8}  " + " ".join(f"{s[f'recall@{k}']:6.3f}" for k in KS) + "  "
              + " ".join(f"{s[f'bite_answer@{k}']:6.3f}" for k in BITE_KS)
              + f"  {s['tokens_per_bite']:8.1f} {s['tokens_per_result']:10.1f}")
        for kind, m in s["by_kind"].items():
            print(f"{'':>8}  {kind:<9} n={m['items']:<3} R@5 {m['recall@5']:.3f}  bite@3 {m['bite_answer@3']:.3f}")
    print("seconds: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items()))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
