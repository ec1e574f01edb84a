"""The retrieval benchmarks run end to end on tiny inputs and print their JSON figures last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from processor.memory.gguf_convert import ensure_default_gguf

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    ensure_default_gguf(folder)
    return folder


def run_bench(script: str, *args: str, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["ENGRAM_HOME"] = str(home)
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def tiny_locomo(path: Path) -> Path:
    def turn(speaker: str, dia_id: str, text: str, **extra: str) -> dict:
        return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}

    sample = {
        "sample_id": "conv-tiny",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                turn("Ann", "D1:1", "I adopted a grey cat called Pixel last week."),
                turn("Bob", "D1:2", "Lovely! I have been training for the Lisbon marathon."),
                turn("Ann", "D1:3", "Look at my garden.", img_url="http://x/1.jpg", blip_caption="a photo of tulips"),
                turn("Bob", "D1:4", "Those tulips are gorgeous."),
            ],
            "session_2_date_time": "10:02 am on 20 June, 2023",
            "session_2": [
                turn("Bob", "D2:1", "I finished the marathon in under four hours!"),
                turn("Ann", "D2:2", "Congratulations! Pixel knocked over my coffee this morning."),
                turn("Bob", "D2:3", "Cats will be cats."),
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "Which marathon did Bob run?", "answer": "Lisbon", "evidence": ["D1:2; D2:1"],
             "category": 1},
            {"question": "What flowers grow in Ann's garden?", "answer": "tulips", "evidence": ["D:1:3"],
             "category": 2},
            {"question": "When did Pixel spill coffee?", "answer": "June 2023", "evidence": ["D2:2", "D", "D9:9"],
             "category": 2},
            {"question": "Would Bob run again?", "answer": "likely", "evidence": [], "category": 3},
            {"question": "What is Bob's dog called?", "adversarial_answer": "Rex", "evidence": ["D1:2"],
             "category": 5},
        ],
    }
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_locomo_bench_reports_recall_and_baselines(tmp_path: Path, models_dir: Path) -> None:
    data = tiny_locomo(tmp_path / "tiny-locomo.json")
    report = run_bench("locomo.py", str(data), "--models-dir", str(models_dir), home=tmp_path / "home")
    for key in ("questions", "recall@3", "recall@5", "recall@10", "bm25_recall@5", "vector_recall@5",
                "hybrid_recall@5", "tokens_per_result", "tokens_per_turn", "tokens_per_result_vs_turn",
                "tokens_per_turn_text", "bite_tokens", "by_category", "seconds", "data_stats", "pipeline"):
        assert key in report, key
    assert report["questions"] == 4  # category 5 is not asked; the question without evidence is not scored
    stats = report["data_stats"]
    assert stats["turns"] == 7 and stats["sessions"] == 2
    assert stats["evidence_ids_scored"] == 5  # "D1:2; D2:1" is two ids, "D:1:3" is D1:3
    assert stats["evidence_unparseable"] == ["D"]
    assert stats["evidence_naming_no_turn"] == ["conv-tiny:D9:9"]
    assert report["pipeline"]["messages"] == 7 and report["pipeline"]["episodes"] >= 4
    # With a conversation this small, ten results cover every turn.
    assert report["recall@10"] == 1.0
    assert 0.0 <= report["recall@3"] <= report["recall@5"] <= report["recall@10"]


def test_search_bench_reports_latency_against_the_bound(tmp_path: Path, models_dir: Path) -> None:
    report = run_bench("search.py", "--sizes", "500", "--queries", "10", "--models-dir", str(models_dir),
                       home=tmp_path / "home")
    [result] = report["results"]
    assert result["episodes"] == 500
    for name in ("bound", "index_top", "search_episodes", "store_search"):
        assert result[name]["p95_ms"] >= result[name]["p50_ms"] > 0
    for key in ("p95_ms", "bound_p95_ms", "p95_vs_bound", "store_search_p95_ms"):
        assert key in report


def test_startup_bench_measures_each_piece_against_its_baseline(tmp_path: Path, models_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["ENGRAM_MODELS_DIR"] = str(models_dir)
    done = subprocess.run([sys.executable, str(REPO / "bench" / "startup.py"), "--runs", "2", "--mcp-runs", "1",
                           "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "startup"
    for key in ("session_start_baseline", "session_start_hook", "mcp_trivial_init", "mcp_engram_init",
                "mcp_trivial_call", "mcp_recall_via_processor", "mcp_recall_in_process", "cli_bare_interpreter",
                "cli_recall", "cli_status", "cli_recall_processor_down"):
        assert report[f"{key}_median_ms"] > 0, key
    assert report["session_start_vs_bare"] > 0 and report["cli_recall_vs_bare"] > 0
    assert report["cli_output_same_without_processor"] is True
    assert set(report["meets_goals"]) == {"session_start", "mcp_initialize", "first_recall", "cli_recall"}


def test_sweep_bench_runs_and_prints_json_last(tmp_path: Path) -> None:
    report = run_bench("sweep.py", "--memories", "400", "--check-memories", "40", "--files", "200", home=tmp_path)
    sweep, inquisitor = report["sweep"], report["inquisitor"]
    assert sweep["memories"] == 400 and sweep["duplicates_true"] > 0
    assert sweep["duplicates_resolved"] <= sweep["duplicates_true"] and sweep["share_resolved"] >= 0.9
    assert sweep["active_after"] == 400 - sweep["duplicates_resolved"]
    assert inquisitor["memories"] == 40 and sum(inquisitor["verdicts"].values()) == 40


def test_viewer_bench_reports_render_time_against_the_bare_queries(tmp_path: Path) -> None:
    report = run_bench("viewer.py", "--memories", "1000", "--messages", "700", "--runs", "4", home=tmp_path / "home")
    assert report["messages"] == 700 and report["session_memories"] == 140 and report["injections"] == 70
    assert report["page_messages"] == 500 and report["page_rows"] > 500
    for name in ("page_bare", "page_render", "whole_bare", "whole_render", "http"):
        assert report[name]["p95_ms"] >= report[name]["p50_ms"] > 0
    assert report["render_p95_over_bare_p95"] > 0 and isinstance(report["goal_met"], bool)


def test_coding_qa_bench_reports_recall_bites_and_baselines(tmp_path: Path, models_dir: Path) -> None:
    from bench.testbed.transcripts import assistant_line, user_line

    sid = "c0dec0de-0000-0000-0000-000000000001"
    folder = tmp_path / "projects" / "-work-app"
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_text(
        user_line("How do I run the app locally?", session_id=sid, uid="q1", cwd="/work/app")
        + assistant_line("Run `pnpm dev`; it opens at http://localhost:5173.", session_id=sid, uid="a1",
                         cwd="/work/app")
        + user_line("Which database did we pick?", session_id=sid, uid="q2", cwd="/work/app")
        + assistant_line("We chose SQLite because it is one file.", session_id=sid, uid="a2", message_id="m2",
                         cwd="/work/app"))
    qa = tmp_path / "qa.json"
    qa.write_text(json.dumps([
        {"id": "t1", "question": "how to start the dev server", "kind": "question", "answer": "pnpm dev",
         "evidence": ["a1"], "session": sid, "evidence_text": ["opens at  http://localhost:5173"]},
        {"id": "t2", "question": "database choice", "kind": "keywords", "answer": "SQLite",
         "evidence": ["a2"], "session": sid, "evidence_text": ["We chose SQLite"]},
    ]))
    report = run_bench("coding_qa.py", str(qa), "--projects-dir", str(tmp_path / "projects"),
                       "--models-dir", str(models_dir), home=tmp_path / "home")
    assert report["items"] == 2 and report["backfill"]["messages"] == 4
    assert report["backfill"]["messages_per_second"] > 0
    for key in ("recall@1", "recall@3", "recall@5", "recall@10", "bite_answer@1", "bite_answer@3",
                "tokens_per_bite", "tokens_per_result", "bm25_recall@5", "cosine_recall@5", "by_kind"):
        assert key in report, key
    assert report["recall@10"] == 1.0  # two rounds: ten results hold every answer (whitespace collapsed)
    assert report["bm25_recall@10"] == 0.5  # "database choice" shares no word with the answer line
    assert set(report["by_kind"]["engram"]) == {"question", "keywords"}


def test_helped_bench_finds_a_recurring_failure_and_whether_it_was_told(tmp_path: Path, models_dir: Path) -> None:
    """Two sessions of one project meet `git push` without an upstream; the first got past it. The replay tells
    the second session the fix right after its failure: the automatic moment is helped."""
    from bench.testbed.transcripts import Conversation

    folder = tmp_path / "projects" / "-work-shop"
    folder.mkdir(parents=True)
    for number, (session, branch) in enumerate((("a" * 8 + "-0000-4000-8000-000000000001", "feat-a"),
                                                 ("b" * 8 + "-0000-4000-8000-000000000002", "feat-b"))):
        c = Conversation(session, cwd="/work/shop", start=f"2026-11-0{number + 1}T10:00:00")
        c.user(f"Push the {branch} work")
        c.bash("git push", f"fatal: The current branch {branch} has no upstream branch.", error=True)
        c.bash(f"git push --set-upstream origin {branch}", f"branch '{branch}' set up to track 'origin/{branch}'.")
        c.say("Pushed.", end_turn=True)
        (folder / f"{session}.jsonl").write_text(c.text())
    result = run_bench("helped.py", "--projects-dir", str(tmp_path / "projects"), "--opportunities",
                       str(tmp_path / "none.json"), "--no-baseline", "--models-dir", str(models_dir),
                       home=tmp_path / "home")
    engram = result["sets"]["custom"]["engram"]
    automatic = engram["automatic"]
    assert automatic["moments"] == 1 and automatic["helped"] == 1.0 and automatic["recurring_told"] == 1.0
    assert engram["precision"] == 1.0 and engram["bites_shown"] == 1  # the fix, once in the session


def test_the_reading_sample_reads_the_same_moments_whatever_the_bites_told() -> None:
    """Two runs that told different bites are read on the same labelled moments: their read figures compare."""
    from bench.helped import audit_sample

    labelled = [{"id": f"op-{n:03d}", "kind": {"a": "fact"}, "knowledge": {"a": f"fact {n}"}, "sources": [],
                 "moment": {"prompt_uuid": f"p{n}", "session": "s"}} for n in range(41)]

    def records(bites: int) -> list[dict]:
        bite = {"at": "prompt", "id": "ep_x", "bite": "a bite"}
        return [{"project": "p", "session": "s", "prompt_uuid": f"p{n}", "prompt": "", "first_session": False,
                 "prompt_index": n, "calls": [], "bites": [bite] * (bites if n == 0 else 0)} for n in range(41)]

    drawn = [[m["id"] for m in audit_sample("cipher-box", records(bites), labelled)["moments"]] for bites in (12, 30)]
    assert drawn[0] == drawn[1] and len(drawn[0]) == 20


def test_capture_bench_has_a_row_per_agent_format(tmp_path: Path) -> None:
    report = run_bench("capture.py", "--generated-mb", "0", "--agent-mb", "1", "--repeats", "1", home=tmp_path)
    from bench.capture import AGENT_CORPORA

    rows = {r["corpus"]: r for r in report["results"]}
    agents = [f"{agent}-1MB" for agent in AGENT_CORPORA]  # every agent's format: codex, gemini, copilot, qwen, …
    assert set(rows) == {"fixtures", *agents}
    assert {"copilot-1MB", "qwen-1MB", "opencode-1MB", "pi-1MB"} <= set(rows)
    for name in agents:
        row = rows[name]
        assert row["files"] > 0 and row["megabytes"] >= 1 and row["messages"] > 0, row
        assert row["ratio"] > 0 and row["cpu_ratio"] > 0
    assert report["ratio"] == min(r["ratio"] for r in report["results"])


def test_worktrees_bench_replays_sessions_of_removed_worktrees_as_one_project(tmp_path: Path,
                                                                               models_dir: Path) -> None:
    """Two sessions on two branches meet `git push` without an upstream; the bench moves each into a worktree of a
    real repository, removes them, and the replay tells the second the first's fix: one project."""
    from bench.testbed.transcripts import Conversation

    folder = tmp_path / "projects" / "-work-shop"
    folder.mkdir(parents=True)
    for number, branch in enumerate(("feat-a", "feat-b")):
        session = f"{'ab'[number] * 8}-0000-4000-8000-00000000000{number + 1}"
        c = Conversation(session, cwd="/work/shop", start=f"2026-11-0{number + 1}T10:00:00", branch=branch)
        c.user(f"Push the {branch} work")
        c.bash("git push", f"fatal: The current branch {branch} has no upstream branch.", error=True)
        c.bash(f"git push --set-upstream origin {branch}", f"branch '{branch}' set up to track 'origin/{branch}'.")
        c.say("Pushed.", end_turn=True)
        (folder / f"{session}.jsonl").write_text(c.text())
    result = run_bench("worktrees.py", "--source", str(tmp_path / "projects"), "--lived", "/work/shop",
                       "--no-baseline", "--models-dir", str(models_dir), home=tmp_path / "home")
    custom = result["sets"]["custom"]
    assert custom["worktrees"] == 2 and custom["projects"]["engram"] == 1 and custom["projects"]["baseline"] == 2
    assert custom["engram"]["automatic"]["recurring_told"] == 1.0
