"""Claude Code's auto memory (<project>/memory/*.md) as a source: provenance, re-reads, dedupe, bad input, redaction."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.automem import read_memory_file, sections
from processor.capture.problems import CaptureProblems
from processor.memory import automem
from processor.memory.automem import sync_folder
from processor.memory.dedupe import Candidate
from processor.memory.episode_store import EpisodeStore
from processor.recall.format import format_expansion, format_hits
from processor.store import automem as automem_sql
from processor.store import open_store, write_transaction
from tests.conftest import REPO, query_live_db, run_engram
from tests.e2e.test_processor_live import wait_for
from tests.support.jobs_fixtures import make_settings, query

SID = "aaaaaaaa-0000-0000-0000-00000000a001"

MEMORY_MD = """\
# Project memory

## Build
- Use pnpm, never npm: the lockfile is pnpm-lock.yaml and CI fails on package-lock.json.
- Run the integration tests with `make itest`; they need Docker running.

## Database
The staging database is Postgres 16 on port 5433, reached through the bastion host.

```sql
SELECT 1;
```
"""


def _project(root: Path, name: str = "-tmp-app") -> Path:
    """A project folder with one captured session in the store (what ties its memory folder to a project)."""
    folder = root / name
    (folder / "memory").mkdir(parents=True, exist_ok=True)
    return folder


def _capture_session(settings, project_dir: Path, project: str = "/tmp/app", session_id: str = SID) -> None:
    conn = open_store(settings.db_path)
    try:
        with write_transaction(conn):
            conn.execute("INSERT INTO sessions (session_id, transcript_path, project, project_root, created_at, "
                         "updated_at) VALUES (?, ?, ?, ?, 1, 1)",
                         (session_id, str(project_dir / f"{session_id}.jsonl"), project, project))
    finally:
        conn.close()


@pytest.fixture
def store(engram_home: Path):
    settings = make_settings()
    s = EpisodeStore(settings, open_store(settings.db_path))
    yield s
    s.conn.close()


def _sync(store: EpisodeStore, folder: Path, problems: CaptureProblems | None = None,
          max_bytes: int = 128 * 1024) -> automem.SyncReport:
    return sync_folder(store, folder, max_bytes=max_bytes, problems=problems)


def _active(store: EpisodeStore) -> dict[str, tuple[str, str]]:
    """content → (id, status) of every non-verbatim memory."""
    return {row[2]: (row[0], row[1]) for row in store.conn.execute(
        "SELECT id, status, full_content FROM episodes WHERE source_type != 'verbatim'")}


def test_sections_keep_their_heading_and_lines() -> None:
    text = "---\nname: notes\ntype: project\n---\n" + MEMORY_MD + "\n---\n\n1. A numbered fact\n   with a second line\n"
    found = sections(text.splitlines())
    assert [(s.heading, s.line_start, s.line_end) for s in found] == [
        ("Build", 8, 8), ("Build", 9, 9), ("Database", 12, 12), ("Database", 14, 16), ("Database", 20, 21)]
    assert found[0].text.startswith("Use pnpm, never npm")  # the list marker is gone
    assert found[0].headings == ["Project memory", "Build"]
    assert found[4].text == "A numbered fact\nwith a second line"
    # Front matter, headings, rules and blank lines are never facts of their own.
    assert not any("name: notes" in s.text or s.text.startswith("#") for s in found)


def test_a_folder_becomes_memories_with_provenance_never_written(store: EpisodeStore, tmp_path: Path) -> None:
    project = _project(tmp_path / "projects")
    memory = project / "memory" / "MEMORY.md"
    memory.write_text(MEMORY_MD)
    (project / "memory" / "debugging.md").write_text("# Flaky tests\n\n- The websocket test flakes under load; "
                                                     "rerun it alone before digging.\n")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns, oct(p.stat().st_mode)) for p in memory.parent.iterdir()}

    # Not yet tied to a project: nothing is read, nothing is lost (read when its first session is captured).
    assert _sync(store, memory.parent).files_read == 0
    _capture_session(store.settings, project)
    report = _sync(store, memory.parent)
    assert (report.files_read, report.added) == (2, 5)

    hits = store.recall("which package manager: pnpm or npm?", limit=3)
    assert hits[0].bite.startswith("MEMORY.md § Build: Use pnpm, never npm"), format_hits(hits)
    assert hits[0].project == "/tmp/app"
    expansion = store.expand(hits[0].id)
    assert expansion.auto_memory == [{"file": str(memory), "heading": "Build", "lines": [4, 4],
                                      "cite": "MEMORY.md § Build", "present": True}]
    assert f"MEMORY.md § Build (lines 4–4) — {memory}" in format_expansion(expansion)
    flaky = store.recall("websocket test flakes", limit=1)[0]
    assert flaky.bite.startswith("debugging.md § Flaky tests:")

    # Nothing is ever written to Claude Code's files.
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns, oct(p.stat().st_mode)) for p in memory.parent.iterdir()}
    assert after == before

    # Unchanged files are not read again and their memories are not touched.
    counts = query(store.settings, "SELECT sum(access_count), count(*) FROM episodes")
    assert _sync(store, memory.parent) == automem.SyncReport()
    assert query(store.settings, "SELECT sum(access_count), count(*) FROM episodes") == counts


def test_a_changed_file_is_reread_and_a_removed_section_is_no_longer_active(store: EpisodeStore,
                                                                             tmp_path: Path) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    memory = project / "memory" / "MEMORY.md"
    memory.write_text(MEMORY_MD)
    _sync(store, memory.parent)
    ids = _active(store)
    pnpm = next(v for k, v in ids.items() if k.startswith("Use pnpm"))[0]
    docker = next(v for k, v in ids.items() if "make itest" in k)[0]

    # A new section at the top moves the others down; the Docker line is removed.
    edited = MEMORY_MD.replace("## Build\n", "## Build\n- Node 22 is the only supported runtime for the web app.\n")
    edited = edited.replace("- Run the integration tests with `make itest`; they need Docker running.\n", "")
    memory.write_text(edited)
    os.utime(memory, ns=(memory.stat().st_atime_ns, memory.stat().st_mtime_ns + 10**9))
    report = _sync(store, memory.parent)
    assert (report.added, report.removed, report.retired) == (1, 1, 1)

    rows = {r[0]: r for r in automem_sql.sections_for(store.conn, [pnpm, docker], present_only=False)}
    assert [r.line_start for r in rows.values() if r.episode_id == pnpm] == [5]  # moved one line down
    assert [r.state for r in rows.values() if r.episode_id == docker] == ["removed"]  # marked, not deleted
    statuses = dict(store.conn.execute("SELECT id, status FROM episodes WHERE id IN (?, ?)", (pnpm, docker)))
    assert statuses == {pnpm: "active", docker: "stale"}  # kept, no longer active
    hits = store.recall("how do I run the integration tests with docker", limit=5)
    stale = next(h for h in hits if h.id == docker)
    assert stale.note is not None and stale.note.startswith("stale: removed from MEMORY.md § Build")
    assert "Node 22" in store.recall("supported node runtime", limit=1)[0].bite

    # The file deleted: every section of it is removed, its state forgotten.
    memory.unlink()
    report = _sync(store, memory.parent)
    assert report.removed == 4
    assert automem_sql.files_in(store.conn, str(memory.parent)) == {}
    assert store.conn.execute("SELECT count(*) FROM episodes WHERE status = 'active' AND source_type != 'verbatim'"
                              ).fetchone()[0] == 0


def test_a_fact_in_a_transcript_and_in_memory_md_is_one_memory_with_two_sources(store: EpisodeStore,
                                                                                 tmp_path: Path) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    fact = "Use pnpm, never npm: the lockfile is pnpm-lock.yaml and CI fails on package-lock.json."
    [extracted] = store.add_memories([Candidate(
        summary="Use pnpm, never npm", full_content=fact, entities=["pnpm"], importance="normal",
        kind="convention", scope="project", source_type="auto", session_id=SID, project="/tmp/app",
        source_uuids=["uuid-from-transcript"])])
    near = "Always use pnpm rather than npm here: the lockfile is pnpm-lock.yaml, and CI fails on a package-lock.json."
    memory = project / "memory" / "MEMORY.md"
    memory.write_text(f"## Build\n- {fact}\n\n## Tooling\n- {near}\n")
    report = _sync(store, memory.parent)
    assert report.added == 0 and report.merged == 2, report

    live = store.conn.execute("SELECT id, source_uuids FROM episodes WHERE status = 'active' "
                              "AND source_type != 'verbatim'").fetchall()
    assert len(live) == 1, live  # one memory...
    current = live[0][0]
    expansion = store.expand(current)
    assert "uuid-from-transcript" in live[0][1]  # ...from the transcript...
    assert {s["cite"] for s in expansion.auto_memory} == {"MEMORY.md § Build", "MEMORY.md § Tooling"}  # ...and the file
    assert extracted.episode_id in (current, *[r[0] for r in store.conn.execute(
        "SELECT id FROM episodes WHERE superseded_by IS NOT NULL")])

    # The file drops both lines: the transcript still states the fact, so the memory stays active.
    memory.write_text("## Build\n")
    os.utime(memory, ns=(memory.stat().st_atime_ns, memory.stat().st_mtime_ns + 10**9))
    report = _sync(store, memory.parent)
    assert (report.removed, report.retired) == (2, 0)
    assert store.conn.execute("SELECT status FROM episodes WHERE id = ?", (current,)).fetchone()[0] == "active"


def test_bad_input_is_skipped_or_cut_with_one_log_line_each(store: EpisodeStore, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    folder = project / "memory"
    (folder / "MEMORY.md").write_text("## Keep\n- The release branch is cut every Tuesday at noon UTC.\n")
    huge = "## Huge\n" + "".join(f"- generated fact number {i} about the huge topic file\n" for i in range(5000))
    (folder / "huge.md").write_text(huge)
    (folder / "binary.md").write_bytes(b"## Bin\n- looks like text\0\x01\x02 but is not\n")
    outside = tmp_path / "secret-notes.md"
    outside.write_text("- The outside file says the launch code is banana.\n")
    (folder / "link.md").symlink_to(outside)
    (folder / "latin1.md").write_bytes(b"## Mixed\n- caf\xe9 is not UTF-8 here\n"
                                       b"- The deploy bot posts in #ops-deploys.\n")
    os.mkfifo(folder / "pipe.md")
    problems = CaptureProblems()

    with caplog.at_level(logging.WARNING, logger="processor.capture.problems"):
        for _ in range(2):  # a second pass over the same files logs nothing new
            _sync(store, folder, problems, max_bytes=2048)
            for name in ("huge.md", "binary.md", "link.md", "latin1.md", "pipe.md"):
                os.utime(folder / name, follow_symlinks=False) if name != "pipe.md" else None
    lines = [r.getMessage() for r in caplog.records]
    for name, words in (("huge.md", "only its first"), ("binary.md", "binary data"), ("link.md", "outside the"),
                        ("latin1.md", "not valid UTF-8"), ("pipe.md", "named pipe")):
        mine = [line for line in lines if line.startswith(str(folder / name))]
        assert len(mine) == 1 and words in mine[0], (name, lines)
    assert {p["kind"] for p in problems.current()} == {
        "automem_truncated", "automem_binary", "automem_outside", "automem_bad_utf8", "automem_not_regular"}

    contents = set(_active(store))
    assert "The release branch is cut every Tuesday at noon UTC." in contents  # nothing else lost
    assert "The deploy bot posts in #ops-deploys." in contents  # the good line of a file with a bad one
    assert not any("caf" in c for c in contents)
    assert not any("banana" in c or "looks like text" in c for c in contents)  # never read
    huge_facts = [c for c in contents if "huge topic file" in c]
    assert huge_facts  # read up to the limit
    assert max(r[0] for r in store.conn.execute(
        "SELECT line_end FROM automem_sections WHERE path LIKE '%huge.md'")) < 50
    assert outside.read_text() == "- The outside file says the launch code is banana.\n"

    # Fixed: the problem resolves, and the file is read.
    (folder / "binary.md").write_text("## Bin\n- The binary file is now plain Markdown about caching.\n")
    _sync(store, folder, problems, max_bytes=2048)
    assert "automem_binary" not in {p["kind"] for p in problems.current()}
    assert "The binary file is now plain Markdown about caching." in _active(store)


def test_secrets_in_auto_memory_are_redacted_before_storage(store: EpisodeStore, engram_home: Path,
                                                            tmp_path: Path) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    secret = "sk-ant-api03-" + "Zx9" * 30
    (project / "memory" / "MEMORY.md").write_text(
        f"## Staging credentials {secret}\n- The staging API key is {secret} (rotate monthly).\n")
    _sync(store, project / "memory")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = store.conn.execute("SELECT summary, full_content FROM episodes").fetchall()
    assert stored and all("[REDACTED:anthropic-api-key]" in text for row in stored for text in row)
    headings = [r[0] for r in store.conn.execute("SELECT heading FROM automem_sections")]
    assert headings == ["Staging credentials [REDACTED:anthropic-api-key]"]
    for path in engram_home.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_file_state_and_memories_commit_together(store: EpisodeStore, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    (project / "memory" / "MEMORY.md").write_text(MEMORY_MD)

    def crash(*args: object) -> None:
        raise RuntimeError("killed while saving the file state")

    monkeypatch.setattr(automem_sql, "save_file", crash)
    with pytest.raises(RuntimeError):
        _sync(store, project / "memory")
    # Rolled back whole: no memory, no section, no file state; the next read does it all.
    assert _active(store) == {}
    assert store.conn.execute("SELECT count(*) FROM automem_sections").fetchone()[0] == 0
    monkeypatch.undo()
    assert _sync(store, project / "memory").added == 4
    assert len(automem_sql.files_in(store.conn, str(project / "memory"))) == 1


def test_a_crash_between_slices_rereads_only_what_is_left(store: EpisodeStore, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "projects")
    _capture_session(store.settings, project)
    (project / "memory" / "MEMORY.md").write_text(MEMORY_MD)
    monkeypatch.setattr(automem, "SLICE", 2)
    monkeypatch.setattr(automem_sql, "save_file", lambda *args: (_ for _ in ()).throw(RuntimeError("killed")))
    served = []
    with pytest.raises(RuntimeError):
        sync_folder(store, project / "memory", max_bytes=4096, between=lambda: served.append(1))
    assert served == [1]  # recollections were served between the two slices
    assert store.conn.execute("SELECT count(*) FROM automem_sections").fetchone()[0] == 2  # the first slice
    monkeypatch.undo()
    assert _sync(store, project / "memory").added == 2  # only the rest
    assert store.conn.execute("SELECT count(*) FROM automem_sections").fetchone()[0] == 4
    assert len(_active(store)) == 4


def test_read_memory_file_reports_gone_and_unchanged(tmp_path: Path) -> None:
    folder = tmp_path / "memory"
    folder.mkdir()
    path = folder / "MEMORY.md"
    problems = CaptureProblems(quiet=True)
    assert read_memory_file(path, folder, 1024, problems).status == "gone"
    path.write_text("- one\n")
    first = read_memory_file(path, folder, 1024, problems)
    assert first.status == "read" and first.file is not None and first.file.lines == ["- one"]
    assert read_memory_file(path, folder, 1024, problems, (first.size, first.mtime_ns)).status == "unchanged"


def test_the_running_processor_reads_and_rereads_auto_memory(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    project = projects / "-tmp-app"
    (project / "memory").mkdir(parents=True)
    (project / f"{SID}.jsonl").write_text(
        user_line("where do release notes go?", session_id=SID, cwd="/tmp/app")
        + assistant_line("In docs/releases, one file per version.", session_id=SID, cwd="/tmp/app"))
    memory = project / "memory" / "MEMORY.md"
    memory.write_text("## Releases\n- Release notes live in docs/releases, one Markdown file per version.\n")
    env = {**os.environ, "ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)}
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = home / "engram.db"

    def section_states() -> list[tuple[str, str]]:
        return query_live_db(db, "SELECT heading, state FROM automem_sections ORDER BY id")

    try:
        wait_for(lambda: section_states() == [("Releases", "present")], timeout=60, interval=0.1)
        # Claude Code edits the file: watchdog's event makes the processor re-read it, no rescan needed.
        memory.write_text("## Releases\n- Release notes live in docs/releases, one Markdown file per version.\n"
                          "\n## Support\n- Customer escalations go to the #support-escalations channel first.\n")
        wait_for(lambda: ("Support", "present") in section_states(), timeout=20, interval=0.1)
        memory.write_text("## Support\n- Customer escalations go to the #support-escalations channel first.\n")
        wait_for(lambda: ("Releases", "removed") in section_states(), timeout=20, interval=0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    recalled = run_engram("recall", "customer escalations channel", "--limit", "1", env=env).stdout
    assert "MEMORY.md § Support: Customer escalations go to the #support-escalations channel first" in recalled
    assert memory.read_text() == "## Support\n- Customer escalations go to the #support-escalations channel first.\n"


def test_backfill_reads_auto_memory_too(tmp_path: Path) -> None:
    home, projects = tmp_path / "home", tmp_path / "projects"
    project = projects / "-tmp-app"
    (project / "memory").mkdir(parents=True)
    (project / f"{SID}.jsonl").write_text(user_line("hello", session_id=SID, cwd="/tmp/app"))
    (project / "memory" / "MEMORY.md").write_text("# Notes\n- Feature flags live in config/flags.yaml.\n")
    env = {"ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects)}
    run_engram("backfill", env=env)
    [hit] = json.loads(run_engram("recall", "where are feature flags", "--limit", "1", "--json", env=env).stdout)
    assert hit["bite"] == "MEMORY.md § Notes: Feature flags live in config/flags.yaml."
    expanded = run_engram("expand", hit["id"], env=env).stdout
    assert "From Claude Code's auto memory:** MEMORY.md § Notes (lines 2–2)" in expanded
