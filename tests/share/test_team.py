"""Teams: a project shared with a team reaches teammates (never conversation, never an opted-out session),
row-level security with several roles, leaving a team; a project is one project across machines by its remote."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from bench.testbed.transcripts import Conversation, assistant_line, user_line
from processor.share import commands
from processor.share.errors import ShareError
from processor.share.pull import NO_LONGER_SHARED
from processor.store import open_store
from tests.support.share_fixtures import Machine, SharedSetup, capture, store_of, sync, write_session
from tests.support.share_fixtures import git_clone as repo


def compact(line: str) -> str:
    return json.dumps(json.loads(line), separators=(",", ":")) + "\n"


def commit_lines(session_id: str, cwd: str, message: str) -> list[str]:
    """A user asking for a commit, the `git commit` tool call and its successful result."""
    use = {"type": "tool_use", "id": f"toolu_{session_id}", "name": "Bash",
           "input": {"command": f'git commit -m "{message}"'}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{session_id}", "content": f"[main 1a2b3c4] {message}"}
    return [compact(user_line("commit it", session_id=session_id, uid=f"{session_id}-c0", cwd=cwd,
                              timestamp="2026-11-02T09:00:00.000Z")),
            compact(assistant_line([use], session_id=session_id, uid=f"{session_id}-c1", cwd=cwd,
                                   message_id=f"{session_id}-cm", timestamp="2026-11-02T09:00:02.000Z")),
            compact(user_line([result], session_id=session_id, uid=f"{session_id}-c2", cwd=cwd,
                              timestamp="2026-11-02T09:00:03.000Z"))]


def ids_on(machine: Machine) -> dict[str, tuple[str, str]]:
    conn = open_store(machine.settings.db_path)
    try:
        return {r[0]: (r[1], r[2] or "") for r in conn.execute("SELECT id, status, project FROM episodes")}
    finally:
        conn.close()


@pytest.fixture
def team(shared: SharedSetup, tmp_path: Path):
    shared.init()
    alice, bob, carol = shared.person("alice"), shared.person("bob"), shared.person("carol")
    shared.team("backend", alice, bob)
    a = shared.machine("alice-laptop", alice)
    b = shared.machine("bob-desktop", bob)
    c = shared.machine("carol-box", carol)
    # One repository, cloned at different paths, over ssh on one machine and https on the other.
    alice_repo = repo(tmp_path / "alice" / "app", "git@GitHub.com:Org/App.git")
    bob_repo = repo(tmp_path / "bob" / "src" / "app", "https://bob@github.com/Org/App")
    return shared, (alice, bob, carol), (a, b, c), (alice_repo, bob_repo)


def test_a_team_project_reaches_teammates_but_never_conversation_or_private_memories(team) -> None:
    shared, (alice, bob, carol), (a, b, c), (alice_repo, bob_repo) = team
    on_a = store_of(a)
    gotcha, _ = on_a.remember("The payments service retries webhooks only 3 times; a 4th failure is dropped.",
                              kind="gotcha", project=alice_repo)
    preference, _ = on_a.remember("I like my coffee black.", kind="preference", scope="global")
    elsewhere, _ = on_a.remember("The side project uses SQLite only.", kind="decision", project="/home/alice/toy")
    # A conversation round and a commit in the team project, captured from a transcript.
    write_session(a, "s-alice", [("Why is the webhook retry count 3?",
                                  "The provider caps redeliveries at 3, so retrying more is pointless.")],
                  cwd=alice_repo)
    with open(a.projects / "-work-app" / "s-alice.jsonl", "a") as f:
        f.writelines(commit_lines("s-alice", alice_repo, "Move the webhook handler into payments/hooks.py"))
    capture(a)
    verbatim = [i for i, (s, p) in ids_on(a).items() if p == alice_repo and i not in (gotcha,)
                and on_a.expand(i, touch=False).source_type == "verbatim"]
    commit = [i for i in ids_on(a) if "Committed 1a2b3c4" in on_a.expand(i, touch=False).full_content]
    assert verbatim and len(commit) == 1
    shared_out = commands.share_project(a.settings, alice_repo, "backend")
    assert shared_out.data["project_key"] == "github.com/Org/App" and shared_out.data["has_remote"]
    # Bob works in his clone; his machine pulls.
    write_session(b, "s-bob", [("Where are the webhooks handled?", "In payments/hooks.py.")], cwd=bob_repo)
    capture(b)
    sync(b)
    on_b = ids_on(b)
    assert on_b[gotcha] == ("active", bob_repo)  # in Bob's own clone's project
    assert on_b[commit[0]][1] == bob_repo
    for private in (preference, elsewhere, *verbatim):
        assert private not in on_b
    hits = store_of(b).recall("how many times are payment webhooks retried", project=bob_repo)
    assert hits and hits[0].id == gotcha
    expansion = store_of(b).expand(gotcha)
    assert expansion.origin is not None and alice in expansion.origin
    # Carol, not in the team, sees nothing of Alice's.
    sync(c)
    assert not set(ids_on(c)) & {gotcha, preference, elsewhere, *verbatim, *commit}
    # Row-level security itself, straight on the server with each role's password.
    with shared.cluster.connect(shared.database, bob, shared.password(bob)) as conn:
        seen = {r[0]: r[1] for r in conn.execute("SELECT id, owner FROM engram.memories")}
        assert gotcha in seen and preference not in seen and elsewhere not in seen
        assert not set(verbatim) & set(seen)
        updated = conn.execute("UPDATE engram.memories SET importance = 'high' WHERE id = %s", (gotcha,)).rowcount
        assert updated == 0  # reads a teammate's row, never writes it
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO engram.memories (id, owner, machine_id, changed_by, seq, scope, kind, "
                         "importance, source_type, status, summary, full_content, created_at, valid_from) VALUES "
                         "('ep_forged', %s, 'm_x', 'm_x', 0, 'global', 'fact', 'normal', 'manual', 'active', 'x', "
                         "'x', 0, 0)", (alice,))
    with shared.cluster.connect(shared.database, carol, shared.password(carol)) as conn:
        assert conn.execute("SELECT count(*) FROM engram.memories WHERE owner = %s", (alice,)).fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # writing into a team one is not in
            conn.execute("INSERT INTO engram.memories (id, machine_id, changed_by, seq, team, scope, kind, "
                         "importance, source_type, status, summary, full_content, created_at, valid_from) VALUES "
                         "('ep_intruder', 'm_x', 'm_x', 0, 'backend', 'global', 'fact', 'normal', 'manual', "
                         "'active', 'x', 'x', 0, 0)")
    # The database owner's own Engram pulls no other person's memory (the owner's SQL could: it owns the tables,
    # and its search function must read past row-level security to use the full-text index; docs/shared-memory.md).
    owners_machine = shared.machine("owner-laptop", shared.owner)
    sync(owners_machine)
    assert not set(ids_on(owners_machine)) & {gotcha, preference, elsewhere, *verbatim, *commit}
    # Machines, project links and messages stay forced: not even the owner's SQL reads other people's.
    with shared.cluster.connect(shared.database, shared.owner, shared.password(shared.owner)) as conn:
        assert conn.execute("SELECT count(*) FROM engram.machines WHERE owner <> current_user").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM engram.shared_projects").fetchone()[0] == 0


def test_leaving_a_team_erases_its_memories_here_and_withdraw_takes_yours_back(team) -> None:
    shared, (alice, bob, _), (a, b, _), (alice_repo, bob_repo) = team
    gotcha, _ = store_of(a).remember("Never run the migration job twice; it is not idempotent.", kind="gotcha",
                                     project=alice_repo)
    commands.share_project(a.settings, alice_repo, "backend")
    mine, _ = store_of(b).remember("The nightly export is at 02:00 UTC.", kind="fact", project=bob_repo)
    commands.share_project(b.settings, bob_repo, "backend")
    sync(a)
    sync(b)
    assert ids_on(b)[gotcha][0] == "active" and ids_on(a)[mine][0] == "active"
    out = commands.leave(b.settings, "backend", withdraw=True)
    assert out.data["left"] and out.data["withdrawn"] >= 1
    assert ids_on(b)[gotcha][0] == "forgotten"
    assert store_of(b).conn.execute("SELECT forgotten_reason FROM episodes WHERE id = ?", (gotcha,)).fetchone()[0] \
        == NO_LONGER_SHARED
    assert ids_on(b)[mine][0] == "active"  # Bob's own memory stays his
    commands.pull(a.settings)  # Alice's machine no longer may read Bob's withdrawn memory: erased there
    assert ids_on(a)[mine][0] == "forgotten"
    with pytest.raises(ShareError, match="not a member of team"):
        commands.share_project(b.settings, bob_repo, "backend")


def test_an_opted_out_session_never_reaches_the_server(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice)
    write_session(a, "s-open", [("How do we seed the dev database?", "Run make seed; it loads fixtures/dev.sql.")],
                  cwd="/work/app")
    write_session(a, "s-off", [("[engram off] Let me vent about my manager for a minute.",
                                "Of course, go ahead."), ("It is about the reorg.", "I understand.")],
                  cwd="/work/app")
    write_session(a, "s-later", [("What port does the admin UI use?", "8081, set in admin/config.py.")],
                  cwd="/work/app")
    capture(a)
    sync(a)
    sessions = {r[0] for r in shared.admin_sql("SELECT DISTINCT session_id FROM engram.memories")}
    assert "s-open" in sessions and "s-later" in sessions and "s-off" not in sessions
    assert not shared.admin_sql("SELECT id FROM engram.memories WHERE full_content LIKE '%manager%' "
                                "OR full_content LIKE '%reorg%'")
    # A session that goes off the record after its memories were pushed: they are taken back from the server.
    pushed = {r[0] for r in shared.admin_sql("SELECT id FROM engram.memories WHERE session_id = 's-later'")}
    write_session(a, "s-later", [("[engram off the record] actually drop all of this", "Done.")], cwd="/work/app")
    capture(a)
    sync(a)
    rows = shared.admin_sql("SELECT id, status, full_content FROM engram.memories WHERE session_id = 's-later' "
                            "OR id = ANY(ARRAY[" + ",".join(f"'{i}'" for i in pushed) + "])")
    assert rows and {r[0] for r in rows} == pushed and all(r[1:] == ("forgotten", None) for r in rows)


def test_a_lesson_learned_on_one_machine_reaches_the_teammates_clone(team) -> None:
    """A gotcha mined from a failure, its diagnosis and the clean rerun (no LLM) is a team memory."""
    shared, _, (a, b, _c), (alice_repo, bob_repo) = team
    session = Conversation("s-alice-lesson", cwd=alice_repo)
    session.user("Build the bundle and commit it")
    session.bash("npm run build", "built dist/app.js in 1.2s")
    session.bash("git add dist/app.js", "The following paths are ignored by one of your .gitignore files:\ndist\n"
                 "hint: Use -f if you really want to add them.", error=True)
    session.say("The `dist/` folder is git-ignored, so the generated `dist/app.js` must be force-added with "
                "`git add -f`.")
    session.bash("git add -f dist/app.js")
    session.say("Done: the bundle is committed.", end_turn=True)
    folder = a.projects / "-work-app"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s-alice-lesson.jsonl").write_text(session.text())
    capture(a)
    lessons = [i for i, (status, project) in ids_on(a).items()
               if project == alice_repo and store_of(a).expand(i, touch=False).kind == "gotcha"]
    assert len(lessons) == 1
    commands.share_project(a.settings, alice_repo, "backend")
    write_session(b, "s-bob-2", [("Where is the bundle built?", "By npm run build, into dist/.")], cwd=bob_repo)
    capture(b)
    sync(b)
    assert ids_on(b).get(lessons[0]) == ("active", bob_repo)
    pulled = store_of(b).expand(lessons[0], touch=False)
    assert pulled.kind == "gotcha" and "git add -f" in pulled.full_content
