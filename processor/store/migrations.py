"""Schema migrations: small named functions, each applied once and recorded.

Never edit a migration that has shipped; add a new one. Each runs in its own
write transaction together with the row that records it.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from processor.clock import now_ms
from processor.config import APPLICATION_ID
from processor.store import projects as projects_sql
from processor.store import share as share_sql
from processor.store.connection import write_transaction

Migration = Callable[[apsw.Connection], None]


def m001_create_sessions(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE TABLE sessions (
            session_id      TEXT PRIMARY KEY,
            transcript_path TEXT NOT NULL,
            project         TEXT,
            project_root    TEXT,
            inode           INTEGER,
            byte_offset     INTEGER NOT NULL DEFAULT 0,
            last_line_hash  TEXT,
            last_line_len   INTEGER NOT NULL DEFAULT 0,
            last_activity   INTEGER,
            created_at      INTEGER NOT NULL,
            updated_at      INTEGER NOT NULL
        );
        CREATE INDEX idx_sessions_activity ON sessions(last_activity);
        """
    )


def m002_create_messages(conn: apsw.Connection) -> None:
    # One row per captured message. An assistant message arrives as several
    # transcript lines sharing message.id; they merge into the row of the first
    # line, and message_lines records the later lines already merged (idempotence).
    conn.execute(
        """
        CREATE TABLE messages (
            id             INTEGER PRIMARY KEY,
            uuid           TEXT NOT NULL UNIQUE,
            session_id     TEXT NOT NULL REFERENCES sessions(session_id),
            parent_uuid    TEXT,
            role           TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            timestamp      TEXT,
            ts_ms          INTEGER,
            cwd            TEXT,
            git_branch     TEXT,
            text           TEXT NOT NULL,
            line_offset    INTEGER NOT NULL,
            api_message_id TEXT
        );
        CREATE INDEX idx_messages_session ON messages(session_id, id);
        CREATE INDEX idx_messages_api_id ON messages(session_id, api_message_id)
            WHERE api_message_id IS NOT NULL;
        CREATE TABLE message_lines (
            line_uuid    TEXT PRIMARY KEY,
            message_uuid TEXT NOT NULL
        ) WITHOUT ROWID;
        """
    )


def m003_messages_fts(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            text, content='messages', content_rowid='id', tokenize='porter unicode61'
        );
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
        END;
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END;
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
            INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
        END;
        """
    )


def m004_create_episodes(conn: apsw.Connection) -> None:
    # History is kept: an update is a new row (the old one gets valid_to + superseded_by);
    # a forget blanks the content but keeps the id, so later lookups can say what happened.
    conn.execute(
        """
        CREATE TABLE episodes (
            id            TEXT PRIMARY KEY,
            session_id    TEXT,
            project       TEXT,
            scope         TEXT NOT NULL DEFAULT 'project' CHECK (scope IN ('global', 'project')),
            summary       TEXT NOT NULL,
            entities      TEXT NOT NULL DEFAULT '[]',
            importance    TEXT NOT NULL DEFAULT 'normal' CHECK (importance IN ('high', 'normal')),
            kind          TEXT NOT NULL DEFAULT 'other' CHECK (kind IN ('decision', 'preference', 'convention',
                              'bugfix', 'gotcha', 'fact', 'task', 'other')),
            source_type   TEXT NOT NULL DEFAULT 'auto' CHECK (source_type IN ('auto', 'manual', 'verbatim')),
            full_content  TEXT NOT NULL,
            source_uuids  TEXT NOT NULL DEFAULT '[]',
            content_hash  TEXT NOT NULL,
            embedding     BLOB,
            created_at    INTEGER NOT NULL,
            accessed_at   INTEGER NOT NULL,
            access_count  INTEGER NOT NULL DEFAULT 0,
            valid_from    INTEGER NOT NULL,
            valid_to      INTEGER,
            superseded_by TEXT REFERENCES episodes(id),
            status        TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'stale', 'forgotten'))
        );
        CREATE INDEX idx_episodes_scope ON episodes(scope, project);
        CREATE INDEX idx_episodes_session ON episodes(session_id);
        CREATE INDEX idx_episodes_hash ON episodes(content_hash);
        CREATE INDEX idx_episodes_created ON episodes(created_at);
        """
    )


def m005_episodes_fts(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE VIRTUAL TABLE episodes_fts USING fts5(
            summary, full_content, entities, content='episodes', content_rowid='rowid',
            tokenize='porter unicode61'
        );
        CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
            INSERT INTO episodes_fts(rowid, summary, full_content, entities)
            VALUES (new.rowid, new.summary, new.full_content, new.entities);
        END;
        CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
            INSERT INTO episodes_fts(episodes_fts, rowid, summary, full_content, entities)
            VALUES ('delete', old.rowid, old.summary, old.full_content, old.entities);
        END;
        CREATE TRIGGER episodes_fts_update AFTER UPDATE OF summary, full_content, entities ON episodes BEGIN
            INSERT INTO episodes_fts(episodes_fts, rowid, summary, full_content, entities)
            VALUES ('delete', old.rowid, old.summary, old.full_content, old.entities);
            INSERT INTO episodes_fts(rowid, summary, full_content, entities)
            VALUES (new.rowid, new.summary, new.full_content, new.entities);
        END;
        """
    )


def m006_episode_progress_and_meta(conn: apsw.Connection) -> None:
    # episodized_through: the last messages.id already turned into episodes, committed
    # with those episodes. meta records which embedding model made the stored vectors.
    conn.execute(
        """
        ALTER TABLE sessions ADD COLUMN episodized_through INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """
    )


def m007_episode_digest_indexes(conn: apsw.Connection) -> None:
    # The SessionStart digest (processor/recall/digest.py) reads the newest active episodes of
    # one scope/project/importance in index order and stops at its LIMIT: < 1 s even at 100k episodes.
    conn.execute(
        """
        CREATE INDEX idx_episodes_active_scope_importance ON episodes(scope, importance, created_at)
            WHERE status = 'active';
        CREATE INDEX idx_episodes_active_project_importance ON episodes(project, importance, created_at)
            WHERE status = 'active';
        CREATE INDEX idx_episodes_active_project_created ON episodes(project, created_at)
            WHERE status = 'active';
        """
    )


def m008_job_queue_and_llm_costs(conn: apsw.Connection) -> None:
    # The durable single-worker job queue (processor/jobs). A dedupe key is unique only while its job
    # is pending or running, so a finished job never blocks the next one for the same key.
    # llm_calls is the cost ledger: one row per backend call, written even when the output is unusable.
    # extraction_state is the per-session extraction progress, committed with the episodes it produced.
    conn.execute(
        """
        CREATE TABLE jobs (
            id              INTEGER PRIMARY KEY,
            type            TEXT NOT NULL,
            dedupe_key      TEXT NOT NULL,
            priority        INTEGER NOT NULL,
            payload         TEXT NOT NULL DEFAULT '{}',
            state           TEXT NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'running', 'done', 'failed')),
            attempts        INTEGER NOT NULL DEFAULT 0,
            next_attempt_at INTEGER NOT NULL,
            last_error      TEXT,
            owner_pid       INTEGER,
            created_at      INTEGER NOT NULL,
            started_at      INTEGER,
            finished_at     INTEGER,
            updated_at      INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX idx_jobs_live_dedupe ON jobs(dedupe_key) WHERE state IN ('pending', 'running');
        CREATE INDEX idx_jobs_ready ON jobs(state, priority, next_attempt_at, id);
        CREATE TABLE llm_calls (
            id          INTEGER PRIMARY KEY,
            job_id      INTEGER,
            job_type    TEXT,
            backend     TEXT NOT NULL,
            model       TEXT NOT NULL,
            started_at  INTEGER NOT NULL,
            duration_ms INTEGER NOT NULL,
            tokens_in   INTEGER NOT NULL DEFAULT 0,
            tokens_out  INTEGER NOT NULL DEFAULT 0,
            cost_usd    REAL NOT NULL DEFAULT 0,
            ok          INTEGER NOT NULL,
            error       TEXT
        );
        CREATE INDEX idx_llm_calls_started ON llm_calls(started_at);
        CREATE TABLE extraction_state (
            session_id        TEXT PRIMARY KEY REFERENCES sessions(session_id),
            extracted_through INTEGER NOT NULL DEFAULT 0,
            rolling_summary   TEXT NOT NULL DEFAULT '',
            last_extracted_at INTEGER,
            extractions       INTEGER NOT NULL DEFAULT 0
        );
        """
    )


def m009_application_id(conn: apsw.Connection) -> None:
    # Engram's own id in the file header: `connect` refuses any database that has neither it nor (from
    # before this migration) Engram's migrations table, so two programs never share one file.
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def m010_session_opt_out(conn: apsw.Connection) -> None:
    # A session's opt-out, recorded durably when its prompt carries a marker (processor/capture/optout.py):
    # 'memory' = no digest and no bites; 'record' = that, and its messages and episodes dropped, never
    # captured again. The row itself stays, so the session is recognised after a restart.
    conn.execute(
        """
        ALTER TABLE sessions ADD COLUMN opt_out TEXT CHECK (opt_out IN ('memory', 'record'));
        ALTER TABLE episodes ADD COLUMN forgotten_reason TEXT;
        """
    )


def m011_cold_path(conn: apsw.Connection) -> None:
    # The cold path (issue 11). Statuses now say what happened to a memory:
    #   active | superseded (a newer version exists: superseded_by) | stale (the inquisitor found the code it
    #   cites gone; memory_checks says why) | archived (a sweep put it away; still searchable) | forgotten.
    # Until now a superseded row had status 'stale'; those rows become 'superseded'. SQLite cannot alter a
    # CHECK, so the table is rebuilt keeping every rowid (episodes_fts is keyed by it). superseded_by loses
    # its REFERENCES clause: the rebuild drops the old table, and a self-reference cannot survive that.
    conn.execute(
        """
        CREATE TABLE episodes_v2 (
            id            TEXT PRIMARY KEY,
            session_id    TEXT,
            project       TEXT,
            scope         TEXT NOT NULL DEFAULT 'project' CHECK (scope IN ('global', 'project')),
            summary       TEXT NOT NULL,
            entities      TEXT NOT NULL DEFAULT '[]',
            importance    TEXT NOT NULL DEFAULT 'normal' CHECK (importance IN ('high', 'normal')),
            kind          TEXT NOT NULL DEFAULT 'other' CHECK (kind IN ('decision', 'preference', 'convention',
                              'bugfix', 'gotcha', 'fact', 'task', 'other')),
            source_type   TEXT NOT NULL DEFAULT 'auto' CHECK (source_type IN ('auto', 'manual', 'verbatim')),
            full_content  TEXT NOT NULL,
            source_uuids  TEXT NOT NULL DEFAULT '[]',
            content_hash  TEXT NOT NULL,
            embedding     BLOB,
            created_at    INTEGER NOT NULL,
            accessed_at   INTEGER NOT NULL,
            access_count  INTEGER NOT NULL DEFAULT 0,
            valid_from    INTEGER NOT NULL,
            valid_to      INTEGER,
            superseded_by TEXT,
            status        TEXT NOT NULL DEFAULT 'active'
                              CHECK (status IN ('active', 'superseded', 'stale', 'archived', 'forgotten')),
            forgotten_reason TEXT
        );
        INSERT INTO episodes_v2 (rowid, id, session_id, project, scope, summary, entities, importance, kind,
                                 source_type, full_content, source_uuids, content_hash, embedding, created_at,
                                 accessed_at, access_count, valid_from, valid_to, superseded_by, status,
                                 forgotten_reason)
            SELECT rowid, id, session_id, project, scope, summary, entities, importance, kind, source_type,
                   full_content, source_uuids, content_hash, embedding, created_at, accessed_at, access_count,
                   valid_from, valid_to, superseded_by,
                   CASE WHEN status = 'stale' AND superseded_by IS NOT NULL THEN 'superseded' ELSE status END,
                   forgotten_reason
            FROM episodes;
        -- With foreign keys on, DROP TABLE first deletes every row, and each delete looks for rows whose
        -- superseded_by refers to it: without an index that is a full scan per row, hours at 100k episodes.
        CREATE INDEX IF NOT EXISTS idx_episodes_superseded_by_old ON episodes(superseded_by);
        DROP TABLE episodes;
        ALTER TABLE episodes_v2 RENAME TO episodes;
        CREATE INDEX idx_episodes_scope ON episodes(scope, project);
        CREATE INDEX idx_episodes_session ON episodes(session_id);
        CREATE INDEX idx_episodes_hash ON episodes(content_hash);
        CREATE INDEX idx_episodes_created ON episodes(created_at);
        CREATE INDEX idx_episodes_superseded_by ON episodes(superseded_by) WHERE superseded_by IS NOT NULL;
        CREATE INDEX idx_episodes_active_scope_importance ON episodes(scope, importance, created_at)
            WHERE status = 'active';
        CREATE INDEX idx_episodes_active_project_importance ON episodes(project, importance, created_at)
            WHERE status = 'active';
        CREATE INDEX idx_episodes_active_project_created ON episodes(project, created_at)
            WHERE status = 'active';
        CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
            INSERT INTO episodes_fts(rowid, summary, full_content, entities)
            VALUES (new.rowid, new.summary, new.full_content, new.entities);
        END;
        CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
            INSERT INTO episodes_fts(episodes_fts, rowid, summary, full_content, entities)
            VALUES ('delete', old.rowid, old.summary, old.full_content, old.entities);
        END;
        CREATE TRIGGER episodes_fts_update AFTER UPDATE OF summary, full_content, entities ON episodes BEGIN
            INSERT INTO episodes_fts(episodes_fts, rowid, summary, full_content, entities)
            VALUES ('delete', old.rowid, old.summary, old.full_content, old.entities);
            INSERT INTO episodes_fts(rowid, summary, full_content, entities)
            VALUES (new.rowid, new.summary, new.full_content, new.entities);
        END;

        -- The inquisitor's last verdict per memory: valid | fixed | stale | review | uncertain | skipped.
        CREATE TABLE memory_checks (
            episode_id  TEXT PRIMARY KEY,
            checked_at  INTEGER NOT NULL,
            head_commit TEXT,
            verdict     TEXT NOT NULL,
            reason      TEXT NOT NULL DEFAULT ''
        ) WITHOUT ROWID;
        -- Judgement calls for a person (engram review, memory_review). options: JSON list of
        -- {label, action, text?}. state: open | resolved | merged | dismissed.
        CREATE TABLE reviews (
            id             INTEGER PRIMARY KEY,
            episode_id     TEXT,
            project        TEXT,
            kind           TEXT NOT NULL,
            question       TEXT NOT NULL,
            options        TEXT NOT NULL DEFAULT '[]',
            context        TEXT NOT NULL DEFAULT '',
            created_commit TEXT,
            created_at     INTEGER NOT NULL,
            state          TEXT NOT NULL DEFAULT 'open'
                               CHECK (state IN ('open', 'resolved', 'merged', 'dismissed')),
            chosen         INTEGER,
            resolution     TEXT,
            merged_into    INTEGER,
            resolved_at    INTEGER,
            resolved_by    TEXT
        );
        CREATE INDEX idx_reviews_open ON reviews(state, created_at);
        -- Every action a cold-path job took on a memory or review: what, why, when (nothing silent).
        CREATE TABLE cold_actions (
            id         INTEGER PRIMARY KEY,
            at         INTEGER NOT NULL,
            job_type   TEXT NOT NULL,
            action     TEXT NOT NULL,
            episode_id TEXT,
            review_id  INTEGER,
            detail     TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX idx_cold_actions_type ON cold_actions(job_type, action);
        CREATE TABLE sweeps (
            id           INTEGER PRIMARY KEY,
            project      TEXT,
            pass         INTEGER NOT NULL,
            started_at   INTEGER NOT NULL,
            finished_at  INTEGER NOT NULL,
            pressure     REAL NOT NULL,
            merged       INTEGER NOT NULL DEFAULT 0,
            archived     INTEGER NOT NULL DEFAULT 0,
            consolidated INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE context_checks (
            id                INTEGER PRIMARY KEY,
            measured_at       INTEGER NOT NULL,
            digest_tokens     INTEGER NOT NULL,
            bites_per_message REAL NOT NULL,
            bite_tokens       REAL NOT NULL,
            messages_per_session REAL NOT NULL,
            session_tokens    INTEGER NOT NULL,
            budget_tokens     INTEGER NOT NULL,
            ratio             REAL NOT NULL,
            detail            TEXT NOT NULL DEFAULT '{}'
        );
        """
    )


def m012_injections(conn: apsw.Connection) -> None:
    # What reached the agent, recorded as it happens (processor/recall/injections.py). An offer is the
    # bites the processor wrote to a session's recollection file for one user message; it becomes an
    # injection when the PreToolUse hook's state file says the hook injected it. A 'digest' injection is
    # the SessionStart digest, from the <session>.digest file that hook leaves (once per digest: its time).
    # Injections are inserted in the order they
    # are learnt, so their id is the live viewer's cursor. content: the bites as JSON, or the digest text.
    conn.execute(
        """
        CREATE TABLE recollection_offers (
            session_id   TEXT NOT NULL,
            message_uuid TEXT NOT NULL,
            offered_at   INTEGER NOT NULL,
            content      TEXT NOT NULL,
            PRIMARY KEY (session_id, message_uuid)
        ) WITHOUT ROWID;
        CREATE INDEX idx_offers_time ON recollection_offers(offered_at);
        CREATE TABLE injections (
            id           INTEGER PRIMARY KEY,
            session_id   TEXT NOT NULL,
            kind         TEXT NOT NULL CHECK (kind IN ('bites', 'digest')),
            message_uuid TEXT,
            offered_at   INTEGER NOT NULL,
            injected_at  INTEGER NOT NULL,
            content      TEXT NOT NULL
        );
        CREATE UNIQUE INDEX idx_injections_bites ON injections(session_id, message_uuid) WHERE kind = 'bites';
        CREATE INDEX idx_injections_session ON injections(session_id, id);
        CREATE INDEX IF NOT EXISTS idx_episodes_superseded_by ON episodes(superseded_by)
            WHERE superseded_by IS NOT NULL;
        CREATE UNIQUE INDEX idx_injections_digest ON injections(session_id, injected_at) WHERE kind = 'digest';
        """
    )


def m013_tool_signals(conn: apsw.Connection) -> None:
    # A high-signal tool_use (commit, tracker close, question) waits here for its tool_result.
    conn.execute(
        """
        CREATE TABLE tool_signals (
            tool_use_id TEXT PRIMARY KEY,
            session_id  TEXT NOT NULL,
            use_uuid    TEXT NOT NULL,
            ts_ms       INTEGER,
            pending     TEXT NOT NULL,
            result_uuid TEXT,
            text        TEXT,
            state       TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'ready', 'dropped', 'built'))
        );
        CREATE INDEX idx_tool_signals_state ON tool_signals(session_id, state);
        """
    )


def m014_auto_memory(conn: apsw.Connection) -> None:
    # Claude Code's auto memory (<project>/memory/*.md) read as memories (processor/memory/automem.py).
    # automem_files: each file's state when last read, committed with the memories it produced, so a
    # crash re-reads the file and never skips it. automem_sections: where a memory was stated (file,
    # heading, lines), keyed by the section's content hash; a section gone from the file is 'removed',
    # never deleted. Several sections (and transcript messages) may be the sources of one memory.
    conn.execute(
        """
        CREATE TABLE automem_files (
            path     TEXT PRIMARY KEY,
            folder   TEXT NOT NULL,
            project  TEXT,
            size     INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256   TEXT NOT NULL,
            read_at  INTEGER NOT NULL
        );
        CREATE INDEX idx_automem_files_folder ON automem_files(folder);
        CREATE TABLE automem_sections (
            id           INTEGER PRIMARY KEY,
            path         TEXT NOT NULL,
            section_hash TEXT NOT NULL,
            heading      TEXT NOT NULL,
            line_start   INTEGER NOT NULL,
            line_end     INTEGER NOT NULL,
            episode_id   TEXT NOT NULL,
            state        TEXT NOT NULL DEFAULT 'present' CHECK (state IN ('present', 'removed')),
            added_at     INTEGER NOT NULL,
            removed_at   INTEGER
        );
        CREATE UNIQUE INDEX idx_automem_sections_present ON automem_sections(path, section_hash)
            WHERE state = 'present';
        CREATE INDEX idx_automem_sections_episode ON automem_sections(episode_id);
        """
    )


def m015_messages_indexed_per_batch(conn: apsw.Connection) -> None:
    # FTS5 writes its pending terms out as a new segment at the end of every statement that adds to it
    # (each statement is a savepoint), so the insert trigger made one segment per message, and merging
    # them cost a fifth of capture's time. Capture now indexes each batch's new rows in one statement
    # (store/sessions.py `index_new_messages`); the update and delete triggers stay.
    conn.execute("DROP TRIGGER IF EXISTS messages_fts_insert")


def m016_tool_calls(conn: apsw.Connection) -> None:
    # Every tool use with what it worked on, and whether its result failed (the head and tail of the
    # error): lessons are mined from a failure, the diagnosis after it and the call that then succeeded.
    conn.execute(
        """
        CREATE TABLE tool_calls (
            tool_use_id  TEXT PRIMARY KEY,
            session_id   TEXT NOT NULL,
            use_uuid     TEXT NOT NULL,
            ts_ms        INTEGER,
            tool         TEXT NOT NULL,
            target       TEXT,
            failed       INTEGER NOT NULL DEFAULT 0,
            error        TEXT,
            result_uuid  TEXT,
            result_ts_ms INTEGER
        );
        CREATE INDEX idx_tool_calls_session ON tool_calls(session_id, ts_ms);
        """
    )


def m017_memories_index(conn: apsw.Connection) -> None:
    # A user message's bites are chosen among the project's memories (not its verbatim rounds), read on the
    # hot path: a partial index keeps that read to the memories, however many rounds the project has.
    conn.execute("CREATE INDEX idx_episodes_active_memories ON episodes(project, created_at) "
                 "WHERE status = 'active' AND source_type != 'verbatim'")


def m018_shared_memory(conn: apsw.Connection) -> None:
    # Shared memory (issue 22, processor/share/): the outbox of changes to push, filled by triggers in the
    # transaction of each change, and what this machine knows of the shared database (store/share.py).
    share_sql.create_tables(conn)


def m019_failures_and_origins(conn: apsw.Connection) -> None:
    # Issue 28. Each way a project's commands failed, by signature (hook_kit/failure_keys.py): in which sessions
    # it happened and the memory that tells what fixed it, so the same failure is met with its fix. And where each
    # memory mined without an LLM came from (an error's fix, a fact, a decision…): what the viewer leads with.
    conn.execute(
        """
        CREATE TABLE failure_signatures (
            id         INTEGER PRIMARY KEY,
            project    TEXT,
            fail_key   TEXT NOT NULL,
            call_key   TEXT NOT NULL,
            signature  TEXT NOT NULL,
            sessions   TEXT NOT NULL DEFAULT '{}',
            first_ms   INTEGER,
            last_ms    INTEGER,
            example    TEXT,
            memory_id  TEXT,
            fix        TEXT,
            uses       TEXT
        );
        CREATE INDEX idx_failure_signatures_key ON failure_signatures(project, fail_key);
        CREATE INDEX idx_failure_signatures_memory ON failure_signatures(memory_id) WHERE memory_id IS NOT NULL;
        CREATE TABLE memory_origins (
            episode_id TEXT PRIMARY KEY,
            miner      TEXT NOT NULL
        ) WITHOUT ROWID;
        -- What earlier versions mined, known by its shape: the close-out routine, and lessons (their content
        -- names the command that failed).
        INSERT INTO memory_origins (episode_id, miner) SELECT id, 'routine' FROM episodes
            WHERE kind = 'convention' AND source_type = 'auto' AND summary LIKE 'Close-out routine:%';
        INSERT OR IGNORE INTO memory_origins (episode_id, miner) SELECT id, 'lesson' FROM episodes
            WHERE kind IN ('gotcha', 'bugfix') AND source_type = 'auto' AND full_content LIKE '%Failed: `%';
        """
    )


def m020_session_agent(conn: apsw.Connection) -> None:
    # Issue 25: sessions of the Codex CLI and the Gemini CLI are captured beside Claude Code's. Each session
    # knows the agent that wrote it (every earlier session was Claude Code's); its memories know it through
    # their session.
    conn.execute(
        """
        ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude';
        CREATE INDEX idx_sessions_agent ON sessions(agent, last_activity);
        """
    )


def m021_session_turn_ended(conn: apsw.Connection) -> None:
    # Issue 34: whether a session's last conversation line ended its turn is kept with the lines (the tailer's
    # batch transaction), so a processor killed before it built that turn's last round builds it when it starts
    # again, not at the idle sweep minutes later.
    conn.execute("ALTER TABLE sessions ADD COLUMN turn_ended INTEGER NOT NULL DEFAULT 0")


def m022_project_identity(conn: apsw.Connection) -> None:
    # Issue 34: one project wherever it runs. The repositories and folders seen alive, with the project each is
    # part of (a worktree's, a clone's, a symlinked folder's), so a folder that is gone later (a removed worktree,
    # a backfill of old sessions) resolves the same; and the merges of what now resolves to one project
    # (store/projects.py, processor/capture/project_merge.py).
    conn.execute(projects_sql.SCHEMA)


def m023_signal_origins(conn: apsw.Connection) -> None:
    # Issue 35: a commit message, a tracker reason or a question's answer is a record of the work, recalled when
    # asked for, never told unasked (at a prompt, in the digest): its memory's origin says so. Memories built
    # from signals before this version get the origin too (their id is the one episodize gives a signal's).
    import hashlib

    built = [row[0] for row in conn.execute("SELECT tool_use_id FROM tool_signals WHERE state = 'built'")]
    conn.executemany("INSERT OR IGNORE INTO memory_origins (episode_id, miner) "
                     "SELECT id, 'signal' FROM episodes WHERE id = ?",
                     [("ep_" + hashlib.sha1(f"signal:{tool_use_id}".encode()).hexdigest()[:16],)
                      for tool_use_id in built])


def m024_shared_lessons(conn: apsw.Connection) -> None:
    # Issue 32: a fix learned on one machine is told at the same failure on every other. What makes a memory
    # tellable (its miner, its failure, where it was met) travels with it; a receiver keeps the lesson as pulled,
    # unknown fields included, and a failure's new session queues its memory for a push (store/share.py).
    share_sql.create_lesson_tables(conn)


def m025_worth_telling_counts(conn: apsw.Connection) -> None:
    # Issue 35: a rule the user said is in the digest of the project's next sessions only (store/digest.py
    # `_SESSIONS_SINCE`); which sessions were active after it was said is read from this index. And the sessions
    # that ran a failing command without meeting its failure (store/failures.py `note_runs`): a fix is told before
    # the command only while the command meets that failure in most sessions that run it.
    conn.execute("CREATE INDEX idx_sessions_project ON sessions(project, last_activity)")
    conn.execute("ALTER TABLE failure_signatures ADD COLUMN ran TEXT NOT NULL DEFAULT '{}'")
    # A file too big for the read tool is told before a read of it, not before a `git add` of its folder: its
    # memories get an origin of their own (memory/tool_limits.py, by the summary that miner writes).
    conn.execute("UPDATE memory_origins SET miner = 'tool_limit' WHERE miner = 'fact' AND episode_id IN "
                 "(SELECT id FROM episodes WHERE summary LIKE '%is too big for Read to take whole%')")


def m026_queued_messages(conn: apsw.Connection) -> None:
    # What the user typed while the agent worked waits in Claude Code's queue until it is sent or handed to the
    # model mid-turn (store/queued.py): kept with the offset past the line that queued it, so a crash loses none.
    conn.execute(
        """
        CREATE TABLE queued_messages (
            session_id TEXT NOT NULL,
            seq        INTEGER NOT NULL,
            ts_ms      INTEGER,
            timestamp  TEXT,
            text       TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID
        """
    )


MIGRATIONS: list[Migration] = [
    m001_create_sessions,
    m002_create_messages,
    m003_messages_fts,
    m004_create_episodes,
    m005_episodes_fts,
    m006_episode_progress_and_meta,
    m007_episode_digest_indexes,
    m008_job_queue_and_llm_costs,
    m009_application_id,
    m010_session_opt_out,
    m011_cold_path,
    m012_injections,
    m013_tool_signals,
    m014_auto_memory,
    m015_messages_indexed_per_batch,
    m016_tool_calls,
    m017_memories_index,
    m018_shared_memory,
    m019_failures_and_origins,
    m020_session_agent,
    m021_session_turn_ended,
    m022_project_identity,
    m023_signal_origins,
    m024_shared_lessons,
    m025_worth_telling_counts,
    m026_queued_messages,
]


def applied_migrations(conn: apsw.Connection) -> list[str]:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER)")
    return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]


def migrate(conn: apsw.Connection) -> list[str]:
    """Apply every pending migration; returns the names applied now."""
    done = set(applied_migrations(conn))
    applied_now = []
    for migration in MIGRATIONS:
        name = migration.__name__
        if name in done:
            continue
        with write_transaction(conn):
            # Re-check under the write lock: another process may have just applied it.
            if conn.execute("SELECT 1 FROM schema_migrations WHERE name = ?", (name,)).fetchone():
                continue
            migration(conn)
            conn.execute(
                "INSERT INTO schema_migrations(name, applied_at) VALUES (?, ?)",
                (name, now_ms()),
            )
        applied_now.append(name)
    return applied_now


def schema_version(conn: apsw.Connection) -> int:
    return len(applied_migrations(conn))
