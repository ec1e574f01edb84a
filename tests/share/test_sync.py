"""Shared memory between two machines of one person: a memory made on A is recalled on B; forgets, versions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from processor.share import commands
from processor.share.sync import Sharing
from processor.store import open_store
from tests.support.share_fixtures import Machine, SharedSetup, store_of, sync

PROJECT = "/work/example-app"


@pytest.fixture
def two_machines(shared: SharedSetup) -> tuple[Machine, Machine]:
    shared.init()
    alice = shared.person("alice")
    return shared.machine("a", alice), shared.machine("b", alice)


def test_a_memory_made_on_a_is_recalled_on_b(two_machines: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, b = two_machines
    on_a = store_of(a)
    memory_id, _ = on_a.remember("The staging deploy needs AWS_REGION=eu-west-1 or the upload step silently "
                                 "writes to us-east-1.", kind="gotcha", project=PROJECT)
    on_b = store_of(b)
    assert not on_b.recall("which region does the staging deploy need", project=PROJECT)
    sync(a)
    sync(b)
    hits = on_b.recall("which region does the staging deploy need", project=PROJECT)
    assert hits and hits[0].id == memory_id
    assert "eu-west-1" in on_b.expand(memory_id).full_content
    # The server holds it once, owned by the person, made on machine A.
    rows = shared.admin_sql(f"SELECT owner, machine_id, seq FROM engram.memories WHERE id = '{memory_id}'")
    assert len(rows) == 1 and rows[0][0] == a.role
    # Syncing again changes nothing: no sequence moves, no second copy.
    sync(a)
    sync(b)
    assert shared.admin_sql(f"SELECT seq FROM engram.memories WHERE id = '{memory_id}'") == [(rows[0][2],)]
    assert on_b.conn.execute("SELECT count(*) FROM episodes WHERE id = ?", (memory_id,)).fetchone()[0] == 1


def test_status_reports_pending_and_sync(two_machines: tuple[Machine, Machine]) -> None:
    a, _ = two_machines
    Sharing(a.settings).close_all()  # configured: changes are queued from now on, server or not
    store_of(a).remember("Use ruff, never flake8, in this repository.", kind="convention", project=PROJECT)
    before = commands.status(a.settings)
    assert before.data["pending"] >= 1
    sync(a)
    after = commands.status(a.settings)
    assert after.data["pending"] == 0 and after.data["pushed"] >= 1 and after.data["server_waiting"] == 0
    assert after.data["last_error"] is None


def episode_row(machine: Machine, memory_id: str) -> tuple | None:
    conn = open_store(machine.settings.db_path)
    try:
        return conn.execute("SELECT status, full_content, embedding IS NOT NULL, superseded_by FROM episodes "
                            "WHERE id = ?", (memory_id,)).fetchone()
    finally:
        conn.close()


def test_a_forget_on_b_erases_the_memory_on_a_and_on_the_server(two_machines: tuple[Machine, Machine],
                                                                 shared: SharedSetup) -> None:
    from processor.recall.forget import forget

    a, b = two_machines
    memory_id, _ = store_of(a).remember("The billing webhook secret rotates every Monday at 06:00 UTC.",
                                        kind="fact", project=PROJECT)
    sync(a)
    sync(b)
    assert episode_row(b, memory_id)[0] == "active"
    forget(store_of(b), b.settings, memory_id, "wrong, it rotates monthly")
    sync(b)
    server = shared.admin_sql(f"SELECT status, summary, full_content, embedding, entities, forgotten_reason "
                              f"FROM engram.memories WHERE id = '{memory_id}'")
    assert server == [("forgotten", None, None, None, None, "wrong, it rotates monthly")]
    assert episode_row(a, memory_id)[0] == "active"  # until A's next pull
    sync(a)
    status, content, has_vector, _ = episode_row(a, memory_id)
    assert (status, content, has_vector) == ("forgotten", "", False)
    assert not any(h.id == memory_id for h in store_of(a).recall("billing webhook secret rotation", project=PROJECT))


def test_a_forget_wins_over_a_concurrent_change(two_machines: tuple[Machine, Machine], shared: SharedSetup) -> None:
    from processor.recall.forget import forget
    from processor.store import cold, write_transaction

    a, b = two_machines
    memory_id, _ = store_of(a).remember("Integration tests need the fake S3 on port 9000.", kind="gotcha",
                                        project=PROJECT)
    sync(a)
    sync(b)
    # B changes it while A forgets it; B's change reaches the server first, A's forget after: the forget wins.
    on_b = store_of(b)
    with write_transaction(on_b.conn):
        cold.set_status(on_b.conn, memory_id, "stale", 1)
    forget(store_of(a), a.settings, memory_id)
    sync(b)
    sync(a)
    assert shared.admin_sql(f"SELECT status, full_content FROM engram.memories WHERE id = '{memory_id}'") == [
        ("forgotten", None)]
    sync(b)
    assert episode_row(b, memory_id)[:2] == ("forgotten", "")
    # And the other order: a change pushed after the forget is refused, and erases the memory where it was made.
    other_id, _ = store_of(a).remember("Release branches are cut on Thursdays.", kind="convention",
                                       project=PROJECT)
    sync(a)
    sync(b)
    forget(store_of(a), a.settings, other_id)
    sync(a)
    on_b = store_of(b)
    with write_transaction(on_b.conn):
        cold.set_status(on_b.conn, other_id, "archived", 1)
    Sharing(b.settings).push().forgotten_here  # noqa: B018 - the push learns the server holds a tombstone
    assert episode_row(b, other_id)[:2] == ("forgotten", "")
    assert shared.admin_sql(f"SELECT status FROM engram.memories WHERE id = '{other_id}'") == [("forgotten",)]


def test_concurrent_edits_keep_both_versions_and_the_later_is_current(two_machines: tuple[Machine, Machine],
                                                                       shared: SharedSetup) -> None:
    a, b = two_machines
    original, _ = store_of(a).remember("The API rate limit for the public endpoints is 100 requests per minute.",
                                       kind="fact", project=PROJECT)
    sync(a)
    sync(b)
    # Each machine, offline from the other, stores a new version of the same memory (UPDATE: a new row).
    on_a, on_b = store_of(a), store_of(b)
    from_a, new_a = on_a.remember("The API rate limit for the public endpoints is now 200 requests per minute, "
                                  "raised after the load test.",
                                  kind="fact", project=PROJECT)
    from_b, new_b = on_b.remember("The API rate limit for the public endpoints is now 300 requests per minute "
                                  "for paying customers.",
                                  kind="fact", project=PROJECT)
    assert new_a and new_b
    assert episode_row(a, original)[3] == from_a and episode_row(b, original)[3] == from_b
    sync(a)  # A's version reaches the server first...
    sync(b)  # ...B's second: later by sequence, so current
    sync(a)
    for machine in (a, b):
        assert episode_row(machine, original)[0] == "superseded" and episode_row(machine, original)[3] == from_b
        assert episode_row(machine, from_b)[0] == "active"
        assert episode_row(machine, from_a)[0] == "superseded" and episode_row(machine, from_a)[3] == from_b
        assert "200 requests" in episode_row(machine, from_a)[1]  # both versions kept
    server = {r[0]: r[1:] for r in shared.admin_sql(
        f"SELECT id, status, superseded_by FROM engram.memories WHERE id IN ('{original}', '{from_a}', '{from_b}')")}
    assert server == {original: ("superseded", from_b), from_a: ("superseded", from_b), from_b: ("active", None)}


def test_a_memory_made_from_the_same_messages_on_two_machines_is_one_memory(
        two_machines: tuple[Machine, Machine], shared: SharedSetup) -> None:
    from tests.support.share_fixtures import capture, write_session

    a, b = two_machines
    rounds = [("Why does the importer drop rows with an empty SKU?",
               "Because validate_row() treats an empty SKU as a header line; I changed it to skip only the first "
               "line."), ("Add a test for it.", "Added test_importer_keeps_empty_sku, which fails before the fix.")]
    # The same transcript on both machines (a home folder synced between them, say).
    for machine in (a, b):
        write_session(machine, "s-same", rounds, cwd="/work/app")
        assert capture(machine) >= 1
    local = {m.name: {r[0] for r in store_of(m).conn.execute(
        "SELECT id FROM episodes WHERE session_id = 's-same'")} for m in (a, b)}
    assert local["a"] == local["b"] and local["a"]
    sync(a)
    sync(b)
    sync(a)
    server = shared.admin_sql("SELECT id, count(*) OVER () FROM engram.memories WHERE session_id = 's-same'")
    assert {r[0] for r in server} == local["a"]
    for m in (a, b):
        assert store_of(m).conn.execute("SELECT count(*) FROM episodes WHERE session_id = 's-same'").fetchone()[0] \
            == len(local["a"])


def test_a_machine_with_another_embedding_model_embeds_what_it_pulls_and_never_mixes_spaces(
        shared: SharedSetup, tmp_path) -> None:
    import shutil

    import numpy as np

    from processor.memory.gguf_convert import ensure_default_gguf
    from processor.share.postgres import statements as pg
    from processor.store import episodes as episodes_sql

    shared.init()
    alice = shared.person("alice")
    other_model = tmp_path / "other-model.gguf"
    shutil.copy(ensure_default_gguf(Path(os.environ["ENGRAM_MODELS_DIR"])), other_model)
    a = shared.machine("a", alice)
    b = shared.machine("b", alice, extra=f'embedding_model = "{other_model}"\n')
    made_on_a, _ = store_of(a).remember("The nightly backup job writes to the cold-storage bucket in eu-west-3.",
                                        kind="fact", project=PROJECT)
    made_on_b, _ = store_of(b).remember("Code review needs two approvals for anything under payments/.",
                                        kind="convention", project=PROJECT)
    # A third machine whose model makes 8-dimensional vectors.
    sharing = Sharing(a.settings)
    try:
        db = sharing.open()
        tiny = np.ones(8, dtype=np.float32) / np.sqrt(8)
        pg.push(db.conn, [pg.PushRow(
            id="ep_from_tiny_model", machine_id="m_tiny", team=None, project_key=None, project=PROJECT,
            session_id=None, scope="project", kind="fact", importance="normal", source_type="manual",
            status="active", summary="Staging certificates renew on the first of the month.",
            full_content="Staging certificates renew on the first of the month.", entities="[]",
            source_uuids="[]", content_hash="x", superseded_by=None, created_at=1, valid_from=1, valid_to=None,
            forgotten_reason=None, embedding=tiny, embedding_model="tiny-8d")], "m_tiny", 1)
    finally:
        sharing.close_all()
    sync(a)
    b_sharing = Sharing(b.settings)
    try:
        report = b_sharing.sync().pull
    finally:
        b_sharing.close_all()
    assert report.embedded >= 2 and not report.refused
    on_b = store_of(b)
    assert episodes_sql.get_meta(on_b.conn, "embedding_model") == "other-model.gguf"
    for memory_id in (made_on_a, "ep_from_tiny_model"):
        content = on_b.expand(memory_id, touch=False).full_content
        stored = on_b.conn.execute("SELECT embedding FROM episodes WHERE id = ?", (memory_id,)).fetchone()[0]
        mine = np.frombuffer(on_b.vectors_for([content])[0], dtype=np.float32)
        assert len(stored) == 384 * 4 and float(np.frombuffer(stored, dtype=np.float32) @ mine) > 0.999
    assert on_b.recall("where does the nightly backup go", project=PROJECT)[0].id == made_on_a
    # And the other way: A embeds what B's model made.
    a_sharing = Sharing(a.settings)
    try:
        back = a_sharing.pull()
    finally:
        a_sharing.close_all()
    assert back.embedded >= 1
    assert store_of(a).recall("how many approvals does a payments change need", project=PROJECT)[0].id == made_on_b
    server_models = dict(shared.admin_sql("SELECT id, embedding_model FROM engram.memories"))
    assert server_models[made_on_a] == "all-MiniLM-L6-v2" and server_models[made_on_b] == "other-model.gguf"


def test_a_machine_pointed_at_another_shared_database_pushes_everything_there(shared: SharedSetup) -> None:
    from processor.share.postgres.migrations import grants
    from tests.support.share_fixtures import seed_memories

    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice)
    ids = seed_memories(a, 5)
    sync(a)
    # A second shared database, made and granted the same way, and the machine's URL changed to it.
    other = f"{shared.database}_other"
    shared.cluster.sql(f"CREATE DATABASE {other} OWNER {shared.owner} TEMPLATE engram_template")
    owner_home = shared.machine("owner-other", shared.owner)
    (owner_home.home / "config.toml").write_text(f'shared_database_url = "{shared.cluster.url(shared.owner, other)}"\n')
    commands.init(owner_home.settings)
    statements = [line for line in grants(other, alice).splitlines()
                  if line and not line.startswith(("--", "CREATE ROLE", "INSERT INTO engram.team"))]
    shared.cluster.sql("\n".join(statements), database=other, role=shared.owner, password=shared.password(shared.owner))
    (a.home / "config.toml").write_text(f'shared_database_url = "{shared.cluster.url(alice, other)}"\n')
    sync(a)
    with shared.cluster.connect(other) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT id FROM engram.memories")) == sorted(ids)


def test_what_leaves_the_machine_is_redacted_again_and_its_vector_stays_behind(
        two_machines: tuple[Machine, Machine], shared: SharedSetup) -> None:
    import random
    import string

    from processor.store import write_transaction
    from tests.support.share_fixtures import seed_memories

    a, b = two_machines
    [memory_id] = seed_memories(a, 1, prefix="leaky")
    # A secret that reached the store unredacted (written by a path, or an older rule set, that missed it).
    token = "sk-proj-" + "".join(random.Random(3).choices(string.ascii_letters + string.digits, k=120))
    conn = open_store(a.settings.db_path)
    with write_transaction(conn):
        conn.execute("UPDATE episodes SET full_content = full_content || ' with OPENAI_API_KEY=' || ? WHERE id = ?",
                     (token, memory_id))
    conn.close()
    sync(a)
    [(content, vector)] = shared.admin_sql(f"SELECT full_content, embedding FROM engram.memories "
                                           f"WHERE id = '{memory_id}'")
    assert token not in content and "[REDACTED:" in content
    assert vector is None  # a vector of the unredacted text would carry the secret in another form
    sync(b)
    on_b = store_of(b)
    assert token not in on_b.expand(memory_id, touch=False).full_content
    assert on_b.conn.execute("SELECT embedding IS NOT NULL FROM episodes WHERE id = ?", (memory_id,)).fetchone()[0]
