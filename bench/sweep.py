"""Consolidation pass 1 over 10k memories vs brute-force pairwise cosine; the inquisitor's deterministic pass.

    python bench/sweep.py [--memories 10000] [--check-memories 1000] [--files 5000] [--json]

1. Sweep: N memories of one project go into a fresh store (random unit vectors, 384 dims, as the
   embedder makes): 80% distinct, 15% near duplicates of one of them (cosine >= 0.96), 5% exact copies.
   Timed: the real pass 1 (``run_pass1``: read the rows, LSH buckets, union-find, write the merges in one
   transaction). Baseline, in the same run: brute-force pairwise cosine over the same matrix (blocked
   ``V @ V.T``, every pair i < j at the same threshold), whose union-find groups are the true duplicates.
   Reported: both times and the share of the true duplicates pass 1 resolved. Goal: pass 1 < 5 s at 10k.
2. Inquisitor: a temp git repository with F files (each with two functions); then 2% of files deleted,
   2% renamed and 50 functions renamed in later commits. M memories cite a random file and function.
   Timed: the deterministic pass (one RepoSnapshot: ls-files, log, one git grep for every symbol; then
   ``check`` per memory, including the bounded ``git log -S`` rename searches). Goal: < 10 s for 1k
   memories on 5k files. Applying the verdicts (embedding the fixed versions) is not included.
`--json` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from processor.clock import now_ms  # noqa: E402
from processor.config import load_settings  # noqa: E402
from processor.jobs.base import JobContext  # noqa: E402
from processor.jobs.consolidation import run_pass1  # noqa: E402
from processor.memory.citations import extract  # noqa: E402
from processor.memory.code_check import RepoSnapshot, check  # noqa: E402
from processor.memory.identity import content_hash  # noqa: E402
from processor.store import episodes as sql  # noqa: E402
from processor.store import open_store, write_transaction  # noqa: E402
from processor.store.episodes import NewEpisode  # noqa: E402

DIM = 384
PROJECT = "/bench/project"
THRESHOLD = 0.95
GOAL_SWEEP_SECONDS = 5.0
GOAL_CHECK_SECONDS = 10.0


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM), dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def seeded_vectors(n: int, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    distinct = int(n * 0.80)
    near = int(n * 0.15)
    exact = n - distinct - near
    base = unit_rows(rng, distinct)
    texts = [f"distinct memory {i}" for i in range(distinct)]
    parents = rng.integers(0, distinct, near)
    noise = unit_rows(rng, near) * 0.04
    near_vectors = base[parents] + noise
    near_vectors /= np.linalg.norm(near_vectors, axis=1, keepdims=True)
    texts += [f"near copy {i} of memory {p}" for i, p in enumerate(parents.tolist())]
    copies = rng.integers(0, distinct, exact)
    texts += [texts[c] for c in copies.tolist()]
    vectors = np.vstack([base, near_vectors, base[copies]]).astype(np.float32)
    order = rng.permutation(n)
    return vectors[order], [texts[i] for i in order.tolist()]


def brute_force_duplicates(vectors: np.ndarray, threshold: float) -> int:
    """Memories that are a duplicate of another (n - groups), from every pair's cosine."""
    n = len(vectors)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    block = 1024
    for start in range(0, n, block):
        sims = vectors[start:start + block] @ vectors.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip((rows + start).tolist(), cols.tolist(), strict=True):
            if r < c:
                a, b = find(r), find(c)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return n - len({find(i) for i in range(n)})


def context(settings, conn) -> JobContext:
    return JobContext(None, settings, conn, None, None, threading.Event(), None)  # type: ignore[arg-type]


def bench_sweep(n: int, workdir: Path, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    vectors, texts = seeded_vectors(n, rng)
    settings = load_settings(env={"ENGRAM_HOME": str(workdir / "sweep-home")},
                             overrides={"max_memories_per_project": n // 2, "duplicate_similarity": THRESHOLD})
    settings.home.mkdir(parents=True, exist_ok=True)
    conn = open_store(settings.db_path)
    stamp = now_ms() - n
    with write_transaction(conn):
        for i, (vector, text) in enumerate(zip(vectors, texts, strict=True)):
            sql.insert_episode(conn, NewEpisode(f"ep_{i:08d}", None, PROJECT, "project", text, [], "normal", "fact",
                                                "auto", text, [], content_hash(text), stamp + i), vector.tobytes())
    t0 = time.perf_counter()
    truth = brute_force_duplicates(vectors, THRESHOLD)
    baseline_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run_pass1(context(settings, conn), PROJECT)
    pass1_seconds = time.perf_counter() - t0
    active = conn.execute("SELECT count(*) FROM episodes WHERE status = 'active'").fetchone()[0]
    conn.close()
    pairs = n * (n - 1) // 2
    return {"memories": n, "pass1_seconds": round(pass1_seconds, 3), "baseline_seconds": round(baseline_seconds, 3),
            "speedup": round(baseline_seconds / pass1_seconds, 2), "duplicates_true": truth,
            "duplicates_resolved": result["merged"], "share_resolved": round(result["merged"] / max(truth, 1), 4),
            "pairs_compared": result["compared"], "pairs_total": pairs, "active_after": active,
            "goal_seconds": GOAL_SWEEP_SECONDS}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b", *args], check=True,
                   capture_output=True)


def bench_inquisitor(memories: int, files: int, workdir: Path, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    root = workdir / "repo"
    paths = [f"pkg{i % 50}/mod_{i}.py" for i in range(files)]
    for i, path in enumerate(paths):
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"def func_{i}_a(x):\n    return x\n\n\ndef func_{i}_b(y):\n    return func_{i}_a(y)\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    created = now_ms() - 3_600_000
    chosen = rng.integers(0, files, memories).tolist()
    cites = []
    for k, i in enumerate(chosen):
        fn = f"func_{i}_{'ab'[k % 2]}"
        cites.append((f"The helper `{fn}` in {paths[i]} handles case {k}.", paths[i], fn))
    victims = rng.permutation(files)
    deleted = victims[: files // 50].tolist()
    renamed = victims[files // 50: files // 25].tolist()
    git(root, "rm", "-q", *[paths[i] for i in deleted])
    git(root, "commit", "-q", "-m", "delete some")
    for i in renamed:
        git(root, "mv", paths[i], paths[i].replace("mod_", "module_"))
    git(root, "commit", "-q", "-m", "rename some")
    for i in victims[files // 25: files // 25 + 50].tolist():
        p = root / paths[i]
        p.write_text(p.read_text().replace(f"func_{i}_a", f"func_{i}_first"))
    git(root, "commit", "-q", "-am", "rename functions")
    t0 = time.perf_counter()
    snapshot = RepoSnapshot(str(root), timeout=30)
    snapshot.load_history(created)
    cited = [extract(text, [], str(root)) for text, _, _ in cites]
    symbols = {s for c in cited for s in c.symbols}
    snapshot.load_symbols(symbols)
    snapshot.find_renames(symbols, created)
    snapshot._searched.update(symbols)
    budget = [20]
    verdicts: dict[str, int] = {}
    for c in cited:
        finding = check(snapshot, c, created, symbol_budget=budget)
        verdicts[finding.verdict] = verdicts.get(finding.verdict, 0) + 1
    seconds = time.perf_counter() - t0
    return {"memories": memories, "files": files, "seconds": round(seconds, 3), "verdicts": verdicts,
            "goal_seconds": GOAL_CHECK_SECONDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--check-memories", type=int, default=1000)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="engram-bench-sweep-") as tmp:
        sweep = bench_sweep(args.memories, Path(tmp), args.seed)
        if not args.json:
            print(f"sweep pass 1 over {sweep['memories']} memories: {sweep['pass1_seconds']} s "
                  f"(brute-force pairwise cosine {sweep['baseline_seconds']} s); resolved "
                  f"{sweep['duplicates_resolved']} of {sweep['duplicates_true']} duplicates "
                  f"({sweep['share_resolved']:.1%}) without an LLM, comparing {sweep['pairs_compared']} of "
                  f"{sweep['pairs_total']} pairs", flush=True)
        inquisitor = bench_inquisitor(args.check_memories, args.files, Path(tmp), args.seed)
        if not args.json:
            print(f"inquisitor deterministic pass: {inquisitor['memories']} memories on {inquisitor['files']} files "
                  f"in {inquisitor['seconds']} s: {inquisitor['verdicts']}", flush=True)
    report = {"sweep": sweep, "inquisitor": inquisitor,
              "goals_met": sweep["pass1_seconds"] < GOAL_SWEEP_SECONDS and inquisitor["seconds"] < GOAL_CHECK_SECONDS}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
