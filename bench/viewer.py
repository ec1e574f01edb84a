"""Viewer timeline render time for a big session in a big store vs the same queries bare in SQLite.

    python bench/viewer.py [--memories 100000] [--messages 5000] [--runs 40] [--json]

The store: `--memories` synthetic episodes (bench/synthetic.py), and one session of `--messages` messages
captured by the real Tailer from a transcript written here (alternating user/assistant lines of 20-80
pseudo-words, 10 s apart), with one memory per 5 messages and one recorded injection (3 bites, the real
offer → state-file → ingest path's SQL) per 10, each at its message's time.

Measured per run, alternating:
- bare: the timeline's three SELECTs, word for word (messages, memories, injections of the session) executed with apsw
  and fetched, nothing else: the floor any page must pay;
- render: `Viewer.timeline_page`, what the server does for `GET /ui/session/<id>` before writing the
  bytes: open a connection, the same queries, build the items, render and escape the Jinja template.
Also reported: the whole HTTP request over loopback (server and client), for scale.
Goal: render p95 <= 200 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.synthetic import build_store, pseudo_words, zipf_words  # noqa: E402
from processor.capture.tailer import Tailer  # noqa: E402
from processor.clock import now_ms  # noqa: E402
from processor.config import SettingsHolder, load_settings  # noqa: E402
from processor.service.control_server import ControlServer  # noqa: E402
from processor.store import connect, open_store, write_transaction  # noqa: E402
from processor.store import episodes as episodes_sql  # noqa: E402
from processor.store import viewer as viewer_sql  # noqa: E402
from processor.store.episodes import NewEpisode  # noqa: E402
from processor.viewer import app  # noqa: E402
from processor.viewer.app import Viewer  # noqa: E402

SESSION = "bench0000-0000-4000-8000-000000000001"
GOAL_MS = 200.0
PAGE = app.TIMELINE_PAGE_MESSAGES
DIM = 384
# The page's statements, word for word (processor/store/viewer.py): the newest page of messages, then the
# injections and memories from the time of its first message on.
MESSAGES_SQL = ("SELECT id, uuid, role, ts_ms, text FROM messages WHERE session_id = ? AND id > ? AND id < ? "
                "ORDER BY id DESC LIMIT ?")
INJECTIONS_SQL = ("SELECT i.id, i.session_id, i.kind, i.message_uuid, i.offered_at, i.injected_at, i.content, m.text "
                  "FROM injections i LEFT JOIN messages m ON m.uuid = i.message_uuid "
                  "WHERE i.session_id = ? AND i.id > ? AND i.injected_at >= ? AND i.injected_at < ? ORDER BY i.id")
EPISODES_SQL = ("SELECT rowid, id, created_at, summary, source_type, kind, status FROM episodes "
                "WHERE session_id = ? AND rowid > ? AND created_at >= ? AND created_at < ? ORDER BY created_at, rowid")


def bare_queries(conn, page: int) -> tuple[int, int, int]:
    """The timeline page's SQL alone, rows fetched; returns the row counts."""
    messages = conn.execute(MESSAGES_SQL, (SESSION, 0, 1 << 62, page + 1)).fetchall()
    since = (messages[page - 1][3] or 0) if len(messages) > page else 0  # DESC: the oldest message kept
    injections = conn.execute(INJECTIONS_SQL, (SESSION, 0, since, 1 << 62)).fetchall()
    episodes = conn.execute(EPISODES_SQL, (SESSION, 0, since, 1 << 62)).fetchall()
    return min(len(messages), page), len(episodes), len(injections)


def stats(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(np.mean(ms)), 2)}


def write_transcript(path: Path, messages: int, rng: np.random.Generator,
                     words: np.ndarray) -> list[tuple[str, int]]:
    """A Claude Code transcript of `messages` lines, 10 s apart; returns the user messages' (uuid, time)."""
    start = now_ms() - messages * 10_000
    user_uuids = []
    with path.open("w") as fh:
        for i in range(messages):
            uid = str(uuidlib.UUID(int=i + 1))
            text = " ".join(zipf_words(rng, words, int(rng.integers(20, 80))))
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime((start + i * 10_000) / 1000))
            base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/bench/project-0",
                    "sessionId": SESSION, "version": "2.1.114", "gitBranch": "main", "uuid": uid, "timestamp": stamp}
            if i % 2 == 0:
                entry = {**base, "type": "user", "message": {"role": "user", "content": text}}
                user_uuids.append((uid, start + i * 10_000))
            else:
                entry = {**base, "type": "assistant", "message": {
                    "id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude",
                    "content": [{"type": "text", "text": text}]}}
            fh.write(json.dumps(entry) + "\n")
    return user_uuids


def build(workdir: Path, memories: int, messages: int, seed: int) -> tuple[Path, float]:
    rng = np.random.default_rng(seed)
    words = np.array(pseudo_words(rng, 20_000))
    db = workdir / "engram.db"
    started = time.perf_counter()
    build_store(db, memories, DIM, "bench-model", rng, words)
    folder = workdir / "projects" / "-bench-project-0"
    folder.mkdir(parents=True)
    transcript = folder / f"{SESSION}.jsonl"
    user_uuids = write_transcript(transcript, messages, rng, words)
    conn = open_store(db)
    Tailer(conn).tail(transcript)
    with write_transaction(conn):
        count = messages // 5
        for i in range(count):
            content = " ".join(zipf_words(rng, words, 40))
            source, at = user_uuids[i * len(user_uuids) // count]  # spread over the whole session
            episodes_sql.insert_episode(conn, NewEpisode(
                id=f"ep_session{i:08x}", session_id=SESSION, project="/bench/project-0", scope="project",
                summary=content[:160], entities=[], importance="normal", kind="other", source_type="verbatim",
                full_content=content, source_uuids=[source], content_hash=f"hs{i}", created_at=at + 30_000 + i), None)
        for uid, at in user_uuids[::5]:
            bites = [{"id": f"ep_{j:016x}", "bite": " ".join(zipf_words(rng, words, 25)), "date": "2026-11-01",
                      "importance": "normal"} for j in rng.integers(0, memories, 3)]
            viewer_sql.record_offer(conn, SESSION, uid, bites, at + 500)
            viewer_sql.mark_injected(conn, SESSION, uid, at + 2_000)
    conn.close()
    return db, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="engram-bench-viewer-") as tmp:
        workdir = Path(tmp)
        os.environ["ENGRAM_HOME"] = str(workdir)
        db, build_seconds = build(workdir, args.memories, args.messages, args.seed)
        settings = load_settings(overrides={"projects_dir": str(workdir / "projects")})
        viewer = Viewer(SettingsHolder(settings), lambda conn: None)  # type: ignore[arg-type,return-value]
        bare_conn = connect(db, readonly=True)
        times: dict[str, list[float]] = {}
        shown: dict[str, tuple[int, int, int]] = {}
        # The page as served (the newest TIMELINE_PAGE_MESSAGES messages), then the whole session as one page.
        for label, size in (("page", app.TIMELINE_PAGE_MESSAGES), ("whole", args.messages + 1)):
            app.TIMELINE_PAGE_MESSAGES = size
            shown[label] = bare_queries(bare_conn, size)
            page = viewer.timeline_page(SESSION)
            assert page is not None and page.count('<li id="msg-') == shown[label][0]
            assert page.count('<li id="ep-') == shown[label][1] and page.count('<li id="inj-') == shown[label][2]
            times[f"{label}_bare"], times[f"{label}_render"] = [], []
            for _ in range(3):  # warm the page cache and the template
                bare_queries(bare_conn, size)
                viewer.timeline_page(SESSION)
            runs = args.runs if label == "page" else max(5, args.runs // 4)
            for run in range(runs):
                for name in (("bare", "render") if run % 2 == 0 else ("render", "bare")):
                    started = time.perf_counter()
                    bare_queries(bare_conn, size) if name == "bare" else viewer.timeline_page(SESSION)
                    times[f"{label}_{name}"].append((time.perf_counter() - started) * 1000)
        app.TIMELINE_PAGE_MESSAGES = PAGE
        bare_conn.close()

        # The whole request over loopback, logged in like a browser.
        server = ControlServer(settings.run_dir, port=0, ui=viewer.handle)
        port = server.start()
        try:
            login = viewer.login_url(port).split(str(port), 1)[1]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", login)
            cookie = conn.getresponse().getheader("Set-Cookie").split(";")[0]
            conn.close()
            http_ms = []
            for _ in range(max(5, args.runs // 4)):
                started = time.perf_counter()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", f"/ui/session/{SESSION}", headers={"Cookie": cookie})
                answer = conn.getresponse()
                body = answer.read()
                conn.close()
                assert answer.status == 200
                http_ms.append((time.perf_counter() - started) * 1000)
        finally:
            server.stop()

    whole = shown["whole"]
    report = {
        "memories": args.memories, "messages": whole[0], "session_memories": whole[1], "injections": whole[2],
        "page_messages": PAGE, "page_rows": sum(shown["page"]), "runs": args.runs,
        "build_seconds": round(build_seconds, 1), "page_kilobytes": round(len(body) / 1024),
        **{name: stats(ms) for name, ms in times.items()}, "http": stats(http_ms),
    }
    report["render_p95_over_bare_p95"] = round(report["page_render"]["p95_ms"] / report["page_bare"]["p95_ms"], 2)
    report["goal_met"] = report["page_render"]["p95_ms"] <= GOAL_MS
    print(f"{report['memories']} memories; session of {report['messages']} messages, {report['session_memories']} "
          f"memories, {report['injections']} injections")
    print(f"page = the newest {PAGE} messages and what happened meanwhile ({report['page_rows']} rows, "
          f"{report['page_kilobytes']} KB); whole = the session in one page")
    for name in ("page_bare", "page_render", "http", "whole_bare", "whole_render"):
        s = report[name]
        print(f"  {name:>12}: p50 {s['p50_ms']:8.2f} ms  p95 {s['p95_ms']:8.2f} ms")
    print(f"page render p95 = {report['render_p95_over_bare_p95']}x the bare queries; goal: render p95 <= {GOAL_MS} "
          f"ms ({'met' if report['goal_met'] else 'NOT met'})")
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
