"""The shared database's schema is versioned: init upgrades an older one (and a client refuses to sync until it is);
transcript messages leave the machine only with share_messages = true, and only for the person's own machines."""

from __future__ import annotations

import pytest

from processor.memory.episode_store import EpisodeStore
from processor.recall.forget import forget
from processor.share import commands
from processor.share.errors import ShareError
from processor.share.postgres import migrations as schema
from processor.store import open_store
from tests.support.share_fixtures import SharedSetup, capture, seed_memories, sync, write_session


def test_init_upgrades_an_older_schema_which_clients_refuse_until_then(shared: SharedSetup,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as older:  # the database made by an Engram that knew only the first migration
        older.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        with shared.cluster.connect(shared.database, shared.owner, shared.password(shared.owner)) as conn:
            schema.migrate(conn)
    assert shared.admin_sql("SELECT version FROM engram.migrations ORDER BY version") == [(1,)]
    alice = shared.person("alice", granted=False)
    shared.cluster.sql(f"GRANT CONNECT ON DATABASE {shared.database} TO {alice}; GRANT USAGE ON SCHEMA engram TO "
                       f"{alice}; GRANT SELECT ON engram.migrations TO {alice}", database=shared.database)
    a = shared.machine("a", alice)
    seed_memories(a, 1)
    with pytest.raises(ShareError) as raised:
        sync(a)
    assert f"schema version 1; this Engram needs version {schema.latest_version()}" in raised.value.problem
    assert "engram share init" in (raised.value.fix or "")
    shared.init()
    assert shared.admin_sql("SELECT version, name FROM engram.migrations ORDER BY version") == [
        (schema.version_of(m), m.__name__) for m in schema.MIGRATIONS if m.__name__ not in schema.ADDITIVE]
    assert shared.admin_sql("SELECT version, name FROM engram.additions ORDER BY version") == [
        (schema.version_of(m), m.__name__) for m in schema.MIGRATIONS if m.__name__ in schema.ADDITIVE]
    shared.grant(alice)
    sync(a)
    assert shared.admin_sql("SELECT count(*) FROM engram.memories") == [(1,)]


def test_transcript_messages_go_only_when_asked_and_only_to_the_persons_own_machines(shared: SharedSetup) -> None:
    shared.init()
    alice, bob = shared.person("alice"), shared.person("bob")
    a = shared.machine("a", alice, extra="share_messages = true\n")
    b = shared.machine("b", alice, extra="share_messages = true\n")
    quiet = shared.machine("quiet", bob)  # share_messages left off
    rounds = [("Why does the CSV export drop the last row?",
               "The writer is never flushed: export_csv() returns before close(). I added a with-block.")]
    write_session(a, "s-msg", rounds, cwd="/work/exporter")
    write_session(quiet, "s-quiet", rounds, cwd="/work/exporter", folder="-work-quiet")
    capture(a)
    capture(quiet)
    sync(a)
    sync(quiet)
    sync(b)
    messages = shared.admin_sql("SELECT memory_id, owner, role, text FROM engram.messages")
    assert messages and {m[1] for m in messages} == {alice}  # nothing of Bob's, who did not ask
    piece = messages[0][0]
    on_b = EpisodeStore(b.settings, open_store(b.settings.db_path))
    sources = on_b.expand(piece, touch=False).source_messages
    assert {s["role"] for s in sources} == {"user", "assistant"} and any("flushed" in s["text"] for s in sources)
    with shared.cluster.connect(shared.database, bob, shared.password(bob)) as conn:  # never another person's
        assert conn.execute("SELECT count(*) FROM engram.messages").fetchone()[0] == 0
    forget(EpisodeStore(a.settings, open_store(a.settings.db_path)), a.settings, piece, "not needed")
    sync(a)
    assert not shared.admin_sql(f"SELECT 1 FROM engram.messages WHERE memory_id = '{piece}'")
    sync(b)
    assert on_b.conn.execute("SELECT count(*) FROM share_messages WHERE memory_id = ?", (piece,)).fetchone()[0] == 0
    assert commands.status(b.settings).data["last_error"] is None
