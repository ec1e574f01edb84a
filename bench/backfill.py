"""Indexing speed: a large history backfilled, and the backlog of a heavy load drained, against the model's bound.

    python bench/backfill.py [--megabytes 100] [--short-sessions 2000] [--drain-lines 48000]
                             [--baseline-ref 84d1884 | --no-baseline] [--baseline-seconds 300]
                             [--bound-sample 1500] [--models-dir DIR] [--keep DIR] [--json]

History: copies of the fixture sessions (``bench/real_lines.py``: every line as written, under new ids, their own
times) until the history holds `--megabytes`, plus `--short-sessions` sessions of one exchange each (the first
prompt of a fixture session and the replies to it), in the projects' own folders. Then the real `engram backfill`
(`python -m processor.cli backfill`, a fresh ENGRAM_HOME) over it: capture → episodes → embedding → commit, the
model's load included. Figures: messages captured and memories stored per second of the whole pass.

Drain: the durable backlog of `bench/load.py`'s load (8 sessions x 50 lines/s for 2 minutes: `--drain-lines`
real lines in 8 sessions, written at the time of the run), captured by the real processor (`engram run`) when it
starts; timed from its start until every complete round is an episode and the memory thread has nothing left.

The bound, same run: the embedding model's own batched throughput over the same texts (a seeded sample of
`--bound-sample` of the memories the backfill stored, as they are embedded), measured three ways — one
llama.cpp context on one thread, one context on every core, and one single-threaded context per core, each
fed from its own thread — and the best of them (memories a second, and tokens a second) is the bound.
Messages a second at the bound: the bound times the run's own messages per memory.

Baseline, same run: main before issue 26 (`--baseline-ref`), its tree from git into a temporary folder, the same
history and backlog; it is stopped after `--baseline-seconds` and its rates read from what it committed by then
(messages in episodes, memories), which is what a whole run's rates would be at the pace it kept.
Goals (issue 26): backfill and drain >= 0.7x the model's bound (memories a second).
`--json` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from bench.load import BASELINE_REF, DEFAULT_MODELS, code_of, peak_rss_bytes, stop_processor  # noqa: E402
from bench.real_lines import Replay, large_outputs, read_sessions, retag, session_files  # noqa: E402
from processor.memory.embedder import Embedder, load_embedder  # noqa: E402
from processor.memory.verbatim import embedding_text  # noqa: E402
from processor.service.control_client import ping  # noqa: E402

GOAL_RATIO = 0.7


# --- the history and the backlog -------------------------------------------------------------------------

def write_history(projects: Path, megabytes: float, short_sessions: int, seed: int) -> dict:
    """Copies of the fixture sessions under new ids until `megabytes`, and `short_sessions` one-exchange sessions."""
    sources = [(path.parent.name, path.stem, lines) for path, lines in zip(session_files(), read_sessions(),
                                                                          strict=True)]
    written, copy, files = 0, 0, 0
    while written < megabytes * 2**20:
        copy += 1
        for folder, stem, lines in sources:
            tag = f"{copy:06x}aa".encode()
            session_id = tag.decode() + stem[8:]
            data = b"".join(retag(line, tag, session_id, None) for line in lines)
            target = projects / folder
            target.mkdir(parents=True, exist_ok=True)
            (target / f"{session_id}.jsonl").write_bytes(data)
            written += len(data)
            files += 1
    rng = random.Random(seed)
    for n in range(short_sessions):
        folder, stem, lines = rng.choice(sources)
        first = one_exchange(lines)
        if not first:
            continue
        tag = f"{n:06x}bb".encode()
        session_id = tag.decode() + stem[8:]
        data = b"".join(retag(line, tag, session_id, None) for line in first)
        (projects / folder).mkdir(parents=True, exist_ok=True)
        (projects / folder / f"{session_id}.jsonl").write_bytes(data)
        written += len(data)
        files += 1
    return {"megabytes": round(written / 2**20, 1), "transcripts": files, "copies": copy}


def one_exchange(lines: list[bytes]) -> list[bytes]:
    """A session's lines up to (not including) its second typed prompt: one prompt and the work it asked for."""
    prompts = 0
    for index, line in enumerate(lines):
        compact = line.replace(b" ", b"")
        if b'"type":"user"' in compact and b'"tool_result"' not in compact:
            prompts += 1
            if prompts == 2:
                return lines[:index]
    return lines[:40]


def write_backlog(projects: Path, lines: int, sessions: int = 8) -> int:
    """`lines` real lines in `sessions` live sessions, stamped now: what 2 minutes of bench/load.py leave."""
    real = read_sessions()
    large = large_outputs(real)
    per_session = lines // sessions
    for n in range(sessions):
        session_id = f"{n:08x}-dddd-4ddd-8ddd-{n:012x}"
        folder = projects / f"-bench-drain-p{n % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        stream = Replay(real, large, n, sessions).lines(session_id)
        with open(folder / f"{session_id}.jsonl", "wb") as f:
            for _ in range(per_session):
                f.write(next(stream))
    return per_session * sessions


# --- running a tree's processor ----------------------------------------------------------------------

def environment(home: Path, projects: Path, models: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(projects), ENGRAM_MODELS_DIR=str(models),
               ENGRAM_HTTP_PORT="0", **extra)
    return env


def progress(db: Path) -> dict:
    """What the store holds: messages, messages inside episodes, episodes (read-only, any moment)."""
    if not db.exists():
        return {"messages": 0, "messages_in_episodes": 0, "memories": 0}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        inside = conn.execute("SELECT count(*) FROM messages m JOIN sessions s ON s.session_id = m.session_id "
                              "WHERE m.id <= s.episodized_through").fetchone()[0]
        memories = conn.execute("SELECT count(*) FROM episodes").fetchone()[0]
        doubled = conn.execute("SELECT count(*) - count(DISTINCT id) FROM episodes").fetchone()[0]
    except sqlite3.OperationalError:  # not migrated yet
        return {"messages": 0, "messages_in_episodes": 0, "memories": 0}
    finally:
        conn.close()
    return {"messages": messages, "messages_in_episodes": inside, "memories": memories, "doubled": doubled}


def rates(done: dict, seconds: float, finished: bool) -> dict:
    return {**done, "seconds": round(seconds, 1), "finished": finished,
            "messages_per_second": round(done["messages_in_episodes"] / seconds, 1) if seconds else None,
            "captured_messages_per_second": round(done["messages"] / seconds, 1) if seconds else None,
            "memories_per_second": round(done["memories"] / seconds, 1) if seconds else None}


def run_backfill(code: Path, projects: Path, models: Path, workdir: Path, limit: float | None) -> dict:
    """The real `engram backfill` of `code`'s tree over `projects`; stopped after `limit` seconds if given."""
    home = workdir / "home"
    workdir.mkdir(parents=True, exist_ok=True)
    env = environment(home, projects, models)
    with open(workdir / "backfill.log", "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "backfill"], cwd=code, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        peak = None
        try:
            while proc.poll() is None and (limit is None or time.monotonic() - started < limit):
                peak = peak_rss_bytes(proc.pid) or peak
                time.sleep(0.5)
            seconds = time.monotonic() - started
            finished = proc.poll() == 0
        finally:
            stop_processor(proc)
    if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) and not finished:
        raise SystemExit(f"engram backfill failed (exit {proc.returncode}); see {workdir / 'backfill.log'}")
    return {**rates(progress(home / "engram.db"), seconds, finished),
            "rss_peak_mb": round(peak / 2**20, 1) if peak else None}


def run_drain(code: Path, projects: Path, models: Path, workdir: Path, limit: float) -> dict:
    """The real processor (`engram run`) started on the backlog: seconds until every complete round is an episode
    and the memory thread is idle (or `limit`)."""
    home = workdir / "home"
    workdir.mkdir(parents=True, exist_ok=True)
    env = environment(home, projects, models, ENGRAM_RECENT_DAYS="1")
    with open(workdir / "processor.log", "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=code, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        finished, peak = False, None
        try:
            idle_since = None
            while time.monotonic() - started < limit and proc.poll() is None:
                peak = peak_rss_bytes(proc.pid) or peak
                answer = ping(home / "run", timeout=2)
                busy = answer is None or answer.get("queue_depth") or answer.get("processing") == "episodes"
                if not busy and progress(home / "engram.db")["messages"]:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= 1.0:  # idle a whole second: nothing came back
                        finished = True
                        break
                else:
                    idle_since = None
                time.sleep(0.25)
            seconds = (idle_since or time.monotonic()) - started
        finally:
            stop_processor(proc)
    return {**rates(progress(home / "engram.db"), seconds, finished),
            "rss_peak_mb": round(peak / 2**20, 1) if peak else None}


# --- the model's bound ------------------------------------------------------------------------------

def stored_texts(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [embedding_text(row[0]) for row in conn.execute("SELECT full_content FROM episodes ORDER BY rowid")]
    finally:
        conn.close()


def model_bound(texts: list[str], models: Path) -> dict:
    """Texts a second of the bare model over `texts`: 1 context x 1 thread, 1 x every core, every core x 1."""
    cores = os.cpu_count() or 1
    path = load_embedder(None, models).path  # the converted default model's file
    one = Embedder(path, n_threads=1)
    counts = [one._fit(one._normalise(t))[1] for t in texts]
    tokens = sum(counts)

    def timed(embedders: list[Embedder], texts: list[str] = texts) -> float:
        parts = [texts[i::len(embedders)] for i in range(len(embedders))]
        threads = [threading.Thread(target=e.embed_documents, args=(part,)) for e, part in zip(embedders, parts,
                                                                                              strict=True)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started

    ways = {"one_context_one_thread": [one], "one_context_all_cores": [Embedder(path, n_threads=cores)],
            "one_context_per_core": [one] + [Embedder(path, n_threads=1) for _ in range(cores - 1)]}
    measured = {}
    for name, embedders in ways.items():
        # One context on every core spin-waits badly on a shared machine: a fifth of the texts is enough to see it.
        part = texts[: max(1, len(texts) // 5)] if name == "one_context_all_cores" else texts
        seconds = timed(embedders, part)
        measured[name] = {"seconds": round(seconds, 2), "texts": len(part),
                          "texts_per_second": round(len(part) / seconds, 1),
                          "tokens_per_second": round(sum(counts[: len(part)]) / seconds)}
    best = max(measured.values(), key=lambda m: m["texts_per_second"])
    return {"texts": len(texts), "tokens": tokens, "cores": cores, "ways": measured,
            "memories_per_second": best["texts_per_second"], "tokens_per_second": best["tokens_per_second"]}


# --- the run -----------------------------------------------------------------------------------------

def ratio(rate: float | None, bound: float) -> float | None:
    return round(rate / bound, 2) if rate and bound else None


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    history, backlog = workdir / "history", workdir / "backlog"
    made = None if args.drain_only else write_history(history, args.megabytes, args.short_sessions, args.seed)
    lines = write_backlog(backlog, args.drain_lines)
    trees = {"this": REPO}
    if not args.no_baseline:
        trees["baseline"] = code_of(args.baseline_ref, workdir)
    result: dict = {"history": made, "backlog_lines": lines}
    for name, code in trees.items():
        limit = args.baseline_seconds if name == "baseline" else None
        result[name] = {} if args.drain_only else {
            "backfill": run_backfill(code, history, args.models_dir, workdir / f"{name}-backfill", limit)}
        result[name]["drain"] = run_drain(code, backlog, args.models_dir, workdir / f"{name}-drain",
                                          args.baseline_seconds if name == "baseline" else args.drain_timeout)
        print(f"[{name}] {result[name]}", file=sys.stderr)
    texts = stored_texts(workdir / ("this-drain" if args.drain_only else "this-backfill") / "home" / "engram.db")
    sample = random.Random(args.seed).sample(texts, min(args.bound_sample, len(texts)))
    bound = model_bound(sample, args.models_dir)
    result["bound"] = bound
    for name in trees:
        for part in result[name]:
            run = result[name][part]
            per_memory = run["messages_in_episodes"] / run["memories"] if run["memories"] else 0
            run["vs_bound"] = ratio(run["memories_per_second"], bound["memories_per_second"])
            run["bound_messages_per_second"] = round(bound["memories_per_second"] * per_memory, 1)
            run["messages_vs_bound"] = ratio(run["messages_per_second"], run["bound_messages_per_second"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=100.0, help="size of the generated history")
    parser.add_argument("--short-sessions", type=int, default=2000, help="one-exchange sessions added to it")
    parser.add_argument("--drain-lines", type=int, default=48_000,
                        help="real lines of the backlog (bench/load.py writes 48,000 in its 2 minutes)")
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="seconds the drain may take")
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--baseline-seconds", type=float, default=300.0,
                        help="the baseline's backfill and drain are stopped after this long (rates from progress)")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--drain-only", action="store_true", help="measure the drain only (no generated history)")
    parser.add_argument("--bound-sample", type=int, default=1500, help="stored texts the model's bound is timed on")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(os.environ["ENGRAM_MODELS_DIR"]) if os.environ.get("ENGRAM_MODELS_DIR")
                        else DEFAULT_MODELS)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-backfill-")))
        workdir.mkdir(parents=True, exist_ok=True)
        result = measure(args, workdir)
    mine = result["this"]
    goals = {f"{part}_ge_0.7x_bound": (mine[part]["vs_bound"] or 0) >= GOAL_RATIO for part in mine}
    goals.update({f"{part}_finished": mine[part]["finished"] for part in mine})
    goals["nothing_doubled"] = not any(mine[part].get("doubled") for part in mine)
    report = {"benchmark": "backfill", **result, "baseline_ref": None if args.no_baseline else args.baseline_ref,
              "goals": goals, "goal_met": all(goals.values()), "python": sys.version.split()[0],
              "cpus": os.cpu_count()}
    bound = result["bound"]
    print(f"model bound: {bound['memories_per_second']} memories/s ({bound['tokens_per_second']} tokens/s) "
          f"over {bound['texts']} stored texts", file=sys.stderr)
    for name in ("this", "baseline"):
        if name not in result:
            continue
        for part in result[name]:
            r = result[name][part]
            print(f"{name} {part}: {r['messages_per_second']} messages/s, {r['memories_per_second']} memories/s "
                  f"({r['vs_bound']}x the bound) in {r['seconds']} s{'' if r['finished'] else ' (stopped)'}; "
                  f"RSS peak {r['rss_peak_mb']} MB", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
