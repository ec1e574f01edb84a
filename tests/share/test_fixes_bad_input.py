"""Fixes told everywhere (issue 32), against bad input and the ways machines really differ: a lesson from a newer
Engram, a teammate's fix for a project not cloned here, the same fix learned on three machines at once, a secret in
a fix, a server gone mid-pull, clients older than the schema; and a fix met again, or marked wrong, anywhere."""

from __future__ import annotations

import json
import time
from pathlib import Path

import apsw
import pytest

from bench.testbed.transcripts import Conversation, write_conversations
from processor.capture.project import project_of_folder
from processor.memory.episode_store import EpisodeStore
from processor.recall.forget import forget
from processor.share import commands
from processor.share.connection import connect
from processor.share.postgres import migrations as schema
from processor.status import collect_status, format_status
from processor.store import open_store
from tests.support.share_fixtures import SharedSetup, capture, git_clone, stalled_pull, sync
from tests.support.share_homes import (
    REMOTES,
    RUFF_MISSING,
    Home,
    after_claude_failure,
    after_codex_failure,
    before,
    claude_fix,
    codex_fix,
    earlier_session,
    fixes_of,
    import_error,
    session_begins,
    sid,
    team_homes,
)


def rows(where: Home, statement: str, *args: object) -> list[tuple]:
    conn = open_store(where.settings.db_path)
    try:
        return conn.execute(statement, args).fetchall()
    finally:
        conn.close()


def learn_pytest_fix(a: Home, session: str = "a1") -> str:
    claude_fix(a, sid(session), "2026-11-20T09:00:00")
    capture(a.machine)
    [fix] = [i for i, summary in fixes_of(a).items() if "pip install -e ." in summary]
    return fix


def failed_pytest(where: Home, tag: str, fix: str) -> set[str]:
    return after_claude_failure(where, sid(tag), "pytest", import_error(where.repo), {fix})


def test_a_lesson_from_a_newer_engram_keeps_its_unknown_fields_and_is_told_by_the_known_ones(
        shared: SharedSetup, tmp_path: Path) -> None:
    a, b, _ = team_homes(shared, tmp_path)
    fix = learn_pytest_fix(a)
    sync(a.machine)
    # A newer Engram on A wrote fields this one does not know: at the top, and in the failure's key.
    shared.admin_sql("UPDATE engram.memories SET lesson = jsonb_set(lesson || '{\"v\": 2, \"told\": {\"at\": "
                     "[\"PostToolUseFailure\"]}}', '{failure,exit_codes}', '[1, 4]'), "
                     f"seq = nextval('engram.change_seq') WHERE id = '{fix}'")
    sync(b.machine)
    assert failed_pytest(b, "hb1", fix) == {fix}  # told by the fields it knows
    [(payload,)] = rows(b, "SELECT payload FROM share_lessons WHERE memory_id = ?", fix)
    kept = json.loads(payload)
    assert kept["v"] == 2 and kept["told"] == {"at": ["PostToolUseFailure"]} and kept["failure"]["exit_codes"] == [1, 4]
    # B meets the failure in a session of its own: the count it sends on keeps the newer fields as they were.
    claude_fix(b, sid("b1"), "2026-11-21T09:00:00")
    capture(b.machine)
    sync(b.machine)
    [(lesson,)] = shared.admin_sql(f"SELECT lesson FROM engram.memories WHERE id = '{fix}'")
    assert lesson["v"] == 2 and lesson["told"] == {"at": ["PostToolUseFailure"]}
    assert lesson["failure"]["exit_codes"] == [1, 4] and set(lesson["failure"]["sessions"]) == {sid("a1"), sid("b1")}


def test_a_teammates_fix_for_a_project_not_cloned_here_is_kept_and_told_once_a_clone_appears(
        shared: SharedSetup, tmp_path: Path) -> None:
    a, _, c = team_homes(shared, tmp_path, teammate_clone=False)
    fix = learn_pytest_fix(a)
    sync(a.machine)
    sync(c.machine)
    assert fix in fixes_of(c)  # kept (memory_recall finds it)
    lessons = c.machine.home / "recollections" / "lessons"
    assert not lessons.exists() or not any(fix in f.read_text() for f in lessons.iterdir())  # told nowhere
    assert "1 more wait for a clone of their project here" in format_status(collect_status(c.settings))
    git_clone(Path(c.repo), REMOTES[2])  # bob clones it, and works in it
    earlier_session(c, sid("c0"))
    capture(c.machine)
    sync(c.machine)
    # Filed under the project bob's clone is part of here (capture's name for it: on one test host the clone
    # joins, by its remote, the laptop's checkout that is also alive here).
    assert rows(c, "SELECT project FROM episodes WHERE id = ?", fix) == [(project_of_folder(c.settings.db_path,
                                                                                             c.repo),)]
    assert failed_pytest(c, "hc1", fix) == {fix}
    assert "from teammate" in format_status(collect_status(c.settings))


def test_the_same_fix_learned_on_three_machines_at_once_is_one_memory_everywhere(shared: SharedSetup,
                                                                                 tmp_path: Path) -> None:
    homes = team_homes(shared, tmp_path)
    commands.share_project(homes[2].settings, homes[2].repo, "backend")  # bob shares his clone's memories too
    for where, tag in zip(homes, ("a1", "b1", "c1"), strict=True):
        claude_fix(where, sid(tag), "2026-11-20T09:00:00")  # the same minute, before any sync
        capture(where.machine)
    made = {next(iter(fixes_of(where))) for where in homes}
    assert len(made) == 3  # three memories, one per machine
    for _ in range(2):
        for where in homes:
            sync(where.machine)
    told = [fixes_of(where) for where in homes]
    assert len(told[0]) == 1 and told[0].keys() == told[1].keys() == told[2].keys()
    [one] = told[0]
    assert one == min(made)  # learned at the same moment: the lower id, on every machine alike
    others = made - {one}
    for where, tag in zip(homes, "abc", strict=True):
        later = dict(rows(where, f"SELECT id, superseded_by FROM episodes WHERE id IN {tuple(made)}"))
        for other in others:  # each superseded by the one, or by one superseded by it
            assert later[other] == one or later[later[other]] == one, later
        [(sessions,)] = rows(where, "SELECT sessions FROM failure_signatures WHERE memory_id = ?", one)
        assert set(json.loads(sessions)) == {sid("a1"), sid("b1"), sid("c1")}  # met in three sessions: it recurs
        assert before(where, sid(f"h{tag}1"), "pytest", {one} | others) == {one}
        assert failed_pytest(where, f"h{tag}2", one) == {one}
    # A supersession learned in a pull goes to the server at the machine's next push: the last of them (a machine
    # whose memory lost to one pulled in the second round — which one depends on the ids) one sync later.
    for where in homes:
        sync(where.machine)
    active = shared.admin_sql("SELECT id FROM engram.memories WHERE lesson->>'miner' = 'error_fix' "
                              "AND status = 'active'")
    assert active == [(one,)]


def test_a_secret_in_a_fix_is_redacted_before_it_leaves(shared: SharedSetup, tmp_path: Path) -> None:
    a, b, _ = team_homes(shared, tmp_path)
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    c = Conversation(sid("a1"), cwd=a.repo, start="2026-11-20T09:00:00")
    c.user("Push the release")
    c.bash("git push", "remote: Invalid username or password.\nfatal: Authentication failed for "
                       "'https://github.com/Org/App.git/'", error=True)
    c.bash(f"git remote set-url origin https://x-access-token:{token}@github.com/Org/App.git")
    c.bash("git push", "To https://github.com/Org/App.git\n   1a2b3c4..5d6e7f8  main -> main")
    c.say("Pushed.", end_turn=True)
    write_conversations(a.machine.projects, c)
    capture(a.machine)
    [fix] = fixes_of(a)
    # And a fix line kept from before a redaction rule knew its secret: the push's own redaction catches it.
    conn = apsw.Connection(str(a.settings.db_path))
    conn.execute("UPDATE failure_signatures SET fix = fix || ' (token ' || ? || ')', uses = json_array('git', ?) "
                 "WHERE memory_id = ?", (token, token, fix))
    conn.close()
    sync(a.machine)
    [(lesson,)] = shared.admin_sql(f"SELECT lesson::text FROM engram.memories WHERE id = '{fix}'")
    assert "git remote set-url origin" in lesson and "REDACTED" in lesson
    assert not shared.admin_sql(f"SELECT id FROM engram.memories WHERE concat_ws(' ', summary, full_content, "
                                f"entities::text, lesson::text) LIKE '%{token}%'")
    sync(b.machine)
    out = after_claude_failure(b, sid("hb1"), "git push", "fatal: Authentication failed for "
                                                         "'https://github.com/Org/App.git/'", {fix})
    assert out == {fix}
    assert not [p for p in b.machine.home.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


def test_a_server_gone_mid_pull_leaves_no_fix_half_filed(shared: SharedSetup, tmp_path: Path) -> None:
    a, b, _ = team_homes(shared, tmp_path)
    sync(b.machine)  # B has synced before: its projects are known
    claude_fix(a, sid("a1"), "2026-11-20T09:00:00")
    codex_fix(a, sid("a3"), "2026-11-20T10:00:00")
    capture(a.machine)
    fixes = set(fixes_of(a))
    sync(a.machine)
    # The fixes first in the server's order (every other change comes after them), one change a pull batch.
    shared.admin_sql("UPDATE engram.memories SET seq = nextval('engram.change_seq') "
                     "WHERE lesson->>'miner' IS DISTINCT FROM 'error_fix'")
    with open(b.machine.home / "config.toml", "a") as f:
        f.write("share_batch = 1\n")
    stalled = stalled_pull(b.machine)  # the first batch, fetched, waits to be applied
    fetched = "SELECT pid FROM pg_stat_activity WHERE usename = %s AND state = 'idle' AND query LIKE '%%ORDER BY seq%%'"
    deadline = time.monotonic() + 60
    with shared.cluster.connect(shared.database) as admin:
        while not admin.execute(fetched, (b.machine.role,)).fetchall():
            assert time.monotonic() < deadline, "the pull never fetched its first batch"
            time.sleep(0.05)
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                      (b.machine.role,))  # the server goes away for B
    stalled.release()
    assert stalled.failure, "the pull should have met the server gone"
    here = set(fixes_of(b))
    assert len(here) == 1 and here < fixes  # the first batch: one fix, applied whole
    [(filed,)] = rows(b, "SELECT count(*) FROM failure_signatures WHERE memory_id IS NOT NULL")
    assert filed == 1 and rows(b, "SELECT count(*) FROM share_lessons") == [(1,)]
    assert rows(b, "SELECT memory_id FROM failure_signatures WHERE memory_id IS NOT NULL "
                   "AND memory_id NOT IN (SELECT id FROM episodes)") == []
    sync(b.machine)  # from its cursor: the rest, nothing twice
    assert set(fixes_of(b)) == fixes
    assert rows(b, "SELECT count(*) FROM failure_signatures WHERE memory_id IS NOT NULL") == [(2,)]
    [pytest_fix] = [i for i in fixes if "[dev]" not in fixes_of(b)[i]]
    assert failed_pytest(b, "hb1", pytest_fix) == {pytest_fix}


def test_clients_older_than_the_schema_keep_working_and_their_copies_are_told(
        shared: SharedSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, _ = team_homes(shared, tmp_path)
    fix = learn_pytest_fix(a)
    codex_fix(a, sid("a3"), "2026-11-20T10:00:00")
    capture(a.machine)
    [ruff_fix] = set(fixes_of(a)) - {fix}
    sync(a.machine)
    sync(b.machine)
    # An Engram that knows only the schema before lessons travelled still opens and inits it (p005 is additive)…
    with monkeypatch.context() as older:
        older.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
        connect(a.settings).close()
        commands.init(a.settings)
    # …and what it sends never names the lesson: a change of its keeps it, a forget of its drops it.
    with shared.cluster.connect(shared.database, a.machine.role, shared.password(a.machine.role)) as old:
        old.execute("UPDATE engram.memories SET importance = 'high', seq = nextval('engram.change_seq'), "
                    "changed_by = 'm_older' WHERE id = %s", (fix,))
        old.execute("UPDATE engram.memories SET status = 'forgotten', summary = NULL, full_content = NULL, "
                    "entities = NULL, source_uuids = NULL, content_hash = NULL, embedding = NULL, "
                    "embedding_model = NULL, forgotten_reason = 'wrong', seq = nextval('engram.change_seq') "
                    "WHERE id = %s", (ruff_fix,))
    assert shared.admin_sql(f"SELECT id, lesson IS NOT NULL FROM engram.memories WHERE id IN ('{fix}', "
                            f"'{ruff_fix}') ORDER BY id") == sorted([(fix, True), (ruff_fix, False)])
    sync(b.machine)
    assert failed_pytest(b, "hb1", fix) == {fix}
    assert rows(b, "SELECT status FROM episodes WHERE id = ?", ruff_fix) == [("forgotten",)]


def test_a_copy_from_an_older_engram_is_linked_by_the_session_that_gets_past_its_failure(
        shared: SharedSetup, tmp_path: Path) -> None:
    a, b, _ = team_homes(shared, tmp_path)
    codex_fix(a, sid("a3"), "2026-11-20T10:00:00")
    capture(a.machine)
    [fix] = fixes_of(a)
    sync(a.machine)
    # As an older Engram pushed it: the memory without its lesson.
    shared.admin_sql(f"UPDATE engram.memories SET lesson = NULL, seq = nextval('engram.change_seq') WHERE id = '{fix}'")
    sync(b.machine)
    assert rows(b, "SELECT count(*) FROM failure_signatures") == [(0,)]
    # B's own Codex session gets past the same failure: its lesson has the copy's words, so the copy tells it.
    codex_fix(b, sid("b3"), "2026-11-21T10:00:00")
    capture(b.machine)
    session_begins(b, "nb")
    assert after_codex_failure(b, sid("hb1"), "ruff check src", RUFF_MISSING, {fix}) == {fix}
    assert rows(b, "SELECT miner FROM memory_origins WHERE episode_id = ?", fix) == [("error_fix",)]


def test_a_session_that_gets_past_a_fix_from_elsewhere_strengthens_it_everywhere(shared: SharedSetup,
                                                                                tmp_path: Path) -> None:
    a, b, c = team_homes(shared, tmp_path)
    fix = learn_pytest_fix(a)
    sync(a.machine)
    sync(b.machine)
    assert before(b, sid("hb1"), "pytest", {fix}) == set()  # met in one session: not before the call
    claude_fix(b, sid("b1"), "2026-11-21T09:00:00")  # B meets it too, and gets past it
    capture(b.machine)
    assert fixes_of(b).keys() == {fix}  # no second memory: B's session counts in A's
    sync(b.machine)
    [(lesson,)] = shared.admin_sql(f"SELECT lesson FROM engram.memories WHERE id = '{fix}'")
    assert set(lesson["failure"]["sessions"]) == {sid("a1"), sid("b1")} and len(lesson["machines"]) == 2
    sync(a.machine)
    sync(c.machine)
    session_begins(b, "nb")  # B's own session counted: its next session's index says so
    for where, tag in ((a, "ha2"), (b, "hb2"), (c, "hc2")):  # it recurs now: told before the call everywhere
        assert before(where, sid(tag), "pytest", {fix}) == {fix}


def test_a_fix_marked_wrong_is_silent_wherever_its_owner_syncs(shared: SharedSetup, tmp_path: Path) -> None:
    a, b, c = team_homes(shared, tmp_path)
    fix = learn_pytest_fix(a)
    session_begins(a, "na")
    for where in (a, b, c):
        sync(where.machine)
    # Bob marks it wrong on his machine: his copy is silent; alice's memory is hers (as today: not his to erase).
    forget(EpisodeStore(c.settings, open_store(c.settings.db_path)), c.settings, fix, "marked wrong")
    sync(c.machine)
    assert failed_pytest(c, "hc1", fix) == set() and failed_pytest(a, "ha1", fix) == {fix}
    # Alice marks it wrong on her desktop: it is silent on every machine it was shared with.
    forget(EpisodeStore(b.settings, open_store(b.settings.db_path)), b.settings, fix, "marked wrong")
    for where in (b, a, c):
        sync(where.machine)
    for where, tag in ((a, "ha2"), (b, "hb2"), (c, "hc2")):
        assert failed_pytest(where, tag, fix) == set()
    # A later session on A that gets past it again makes no new memory of it.
    claude_fix(a, sid("a2"), "2026-11-22T09:00:00")
    capture(a.machine)
    assert fixes_of(a) == {}
