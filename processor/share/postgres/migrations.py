"""The shared database's schema: small named migrations (``pNNN_…``), each applied once and recorded with its number.

Like the SQLite ones (``processor/store/migrations.py``): never edit one that has shipped, add a new one.
Everything lives in the schema ``engram``; the ``vector`` extension stays wherever the server keeps it.
The pending migrations run in one transaction with the rows that record them, under an advisory lock, so
two ``engram share init`` at once apply each migration once and a failure leaves the schema as it was. A
server whose schema is newer than this client knows is refused (``processor/share/connection.py``), never
written to.

A migration is *additive* (``ADDITIVE``) when a client that does not know it still reads and writes the
schema correctly: it adds what older clients neither send nor read, and the server keeps it through their
changes. Those are recorded in ``engram.additions``, not ``engram.migrations``: older clients read only the
latter, so an additive upgrade never locks them out. A client refuses a schema only when
``engram.migrations`` holds a version it does not know; it needs every migration it knows, additive or not.

Access is row-level security: a role reads its own rows and its teams', writes only its own. It is forced
on the tables' owner too for machines, project links and messages; on memories it is not (p003: the team
search function must read past it to use the full-text index), and Engram's own queries repeat its rule.
Superusers bypass it all: never use one for Engram.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Cursor = Any  # psycopg.Cursor (psycopg is imported only where sharing is used)
Migration = Callable[[Cursor], None]

SCHEMA = "engram"
MIGRATE_LOCK = 0x656E6772_00000001  # pg_advisory_xact_lock key held while migrating
# pgvector's HNSW index is per embedding model: an expression index on vector(dims) for its rows only.
DEFAULT_MODEL = ("all-MiniLM-L6-v2", 384)
KINDS = ("decision", "preference", "convention", "bugfix", "gotcha", "fact", "task", "other")  # memory/kinds.py
STATUSES = ("active", "superseded", "stale", "archived", "forgotten")
MAX_CONTENT_BYTES = 1024 * 1024  # the server's own bound; clients keep theirs lower (share_max_memory_kb)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def p001_memories(cur: Cursor) -> None:
    cur.execute(
        f"""
        CREATE TABLE engram.machines (
            machine_id      text PRIMARY KEY,
            owner           name NOT NULL DEFAULT current_user,
            hostname        text NOT NULL,
            fingerprint     text NOT NULL,
            embedding_model text,
            registered_at   timestamptz NOT NULL DEFAULT now(),
            last_seen       timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE engram.teams (
            name       text PRIMARY KEY,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE engram.team_members (
            team     text NOT NULL REFERENCES engram.teams(name) ON DELETE CASCADE,
            member   name NOT NULL,
            added_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (team, member)
        );
        CREATE TABLE engram.shared_projects (
            owner       name NOT NULL DEFAULT current_user,
            project_key text NOT NULL,
            team        text NOT NULL REFERENCES engram.teams(name) ON DELETE CASCADE,
            PRIMARY KEY (owner, project_key)
        );
        -- Every change gets the next number, taken under a lock held until its commit (see statements.py),
        -- so changes become visible in sequence order and a puller never skips one committed late.
        CREATE SEQUENCE engram.change_seq;
        CREATE TABLE engram.memories (
            id               text PRIMARY KEY CHECK (id ~ '^ep_[A-Za-z0-9_-]{{1,64}}$'),
            owner            name NOT NULL DEFAULT current_user,
            machine_id       text NOT NULL,
            changed_by       text NOT NULL,
            seq              bigint NOT NULL,
            changed_at       timestamptz NOT NULL DEFAULT now(),
            team             text,
            project_key      text,
            project          text,
            session_id       text,
            scope            text NOT NULL CHECK (scope IN ('global', 'project')),
            kind             text NOT NULL CHECK (kind IN ({_quoted(KINDS)})),
            importance       text NOT NULL CHECK (importance IN ('high', 'normal')),
            source_type      text NOT NULL CHECK (source_type IN ('auto', 'manual', 'verbatim')),
            status           text NOT NULL CHECK (status IN ({_quoted(STATUSES)})),
            summary          text,
            full_content     text CHECK (octet_length(full_content) <= {MAX_CONTENT_BYTES}),
            entities         jsonb,
            source_uuids     jsonb,
            content_hash     text,
            superseded_by    text,
            created_at       bigint NOT NULL,
            valid_from       bigint NOT NULL,
            valid_to         bigint,
            forgotten_reason text,
            embedding        vector,
            embedding_model  text,
            search           tsvector GENERATED ALWAYS AS (
                to_tsvector('english'::regconfig, coalesce(full_content, '') || ' ' || coalesce(entities::text, ''))
            ) STORED,
            -- A forgotten memory is a tombstone: its id and why, no text, no vector.
            CHECK (status <> 'forgotten' OR (summary IS NULL AND full_content IS NULL AND entities IS NULL
                                             AND source_uuids IS NULL AND embedding IS NULL)),
            CHECK (status = 'forgotten' OR (summary IS NOT NULL AND full_content IS NOT NULL)),
            CHECK (embedding IS NULL OR embedding_model IS NOT NULL)
        );
        CREATE UNIQUE INDEX memories_seq ON engram.memories (seq);
        CREATE INDEX memories_team ON engram.memories (team, status) WHERE team IS NOT NULL;
        CREATE INDEX memories_search ON engram.memories USING gin (search);

        ALTER TABLE engram.memories ENABLE ROW LEVEL SECURITY;
        ALTER TABLE engram.memories FORCE ROW LEVEL SECURITY;
        -- Read: your own rows, and the rows of the teams you belong to. Write: only your own, and only into
        -- a team you belong to.
        CREATE POLICY memories_read ON engram.memories FOR SELECT USING (
            owner = current_user
            OR team IN (SELECT m.team FROM engram.team_members m WHERE m.member = current_user));
        CREATE POLICY memories_insert ON engram.memories FOR INSERT WITH CHECK (
            owner = current_user
            AND (team IS NULL OR team IN (SELECT m.team FROM engram.team_members m WHERE m.member = current_user)));
        CREATE POLICY memories_update ON engram.memories FOR UPDATE USING (owner = current_user) WITH CHECK (
            owner = current_user
            AND (team IS NULL OR team IN (SELECT m.team FROM engram.team_members m WHERE m.member = current_user)));

        ALTER TABLE engram.machines ENABLE ROW LEVEL SECURITY;
        ALTER TABLE engram.machines FORCE ROW LEVEL SECURITY;
        CREATE POLICY machines_own ON engram.machines FOR ALL USING (owner = current_user)
            WITH CHECK (owner = current_user);

        ALTER TABLE engram.shared_projects ENABLE ROW LEVEL SECURITY;
        ALTER TABLE engram.shared_projects FORCE ROW LEVEL SECURITY;
        CREATE POLICY shared_projects_own ON engram.shared_projects FOR ALL USING (owner = current_user)
            WITH CHECK (owner = current_user
                        AND team IN (SELECT m.team FROM engram.team_members m WHERE m.member = current_user));

        -- Memberships are managed by the database owner (who bypasses these policies: not FORCEd); a member
        -- sees and may delete (leave) only their own.
        ALTER TABLE engram.team_members ENABLE ROW LEVEL SECURITY;
        CREATE POLICY team_members_read ON engram.team_members FOR SELECT USING (member = current_user);
        CREATE POLICY team_members_leave ON engram.team_members FOR DELETE USING (member = current_user);
        """
    )
    model, dims = DEFAULT_MODEL
    cur.execute(vector_index_statement(model, dims))


def p002_messages(cur: Cursor) -> None:
    # share_messages = true: the transcript messages a memory was made from, for the person's own machines
    # (memory_expand shows them there). Never a team's: the policy reads the owner's rows only.
    cur.execute(
        """
        CREATE TABLE engram.messages (
            memory_id  text NOT NULL,
            uuid       text NOT NULL,
            owner      name NOT NULL DEFAULT current_user,
            session_id text,
            role       text NOT NULL CHECK (role IN ('user', 'assistant')),
            ts_ms      bigint,
            text       text NOT NULL CHECK (octet_length(text) <= 1048576),
            PRIMARY KEY (memory_id, uuid)
        );
        ALTER TABLE engram.messages ENABLE ROW LEVEL SECURITY;
        ALTER TABLE engram.messages FORCE ROW LEVEL SECURITY;
        CREATE POLICY messages_own ON engram.messages FOR ALL USING (owner = current_user)
            WITH CHECK (owner = current_user);
        """
    )


def p003_team_search(cur: Cursor) -> None:
    # memory_recall with scope "team" on the server. Under row-level security Postgres may not use an index
    # for a condition whose function is not LEAKPROOF, and full-text search's @@ is not: every team search
    # became a scan of the whole table. So the search runs in a SECURITY DEFINER function owned by the
    # tables' owner, which filters explicitly by the caller's teams (session_user's memberships), and the
    # owner no longer has row-level security forced on memories (an owner can always turn it off anyway).
    # Every other role still reads only its own rows and its teams'; Engram's own queries filter the same
    # way for the owner too. The function's search_path is pinned, as a definer function's must be.
    cur.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                "WHERE e.extname = 'vector'")
    vector_schema = cur.fetchone()[0].replace('"', '""')
    cur.execute("ALTER TABLE engram.memories NO FORCE ROW LEVEL SECURITY")
    cur.execute(
        f"""
        CREATE FUNCTION engram.team_search(query vector, model text, words text[], top_k integer, cap integer,
                                           in_project text, exact boolean, ef integer, common float8)
        RETURNS TABLE (id text, owner name, machine_id text, team text, project_key text, project text,
                       kind text, importance text, status text, summary text, full_content text,
                       created_at bigint, cosine float8, lexical float8)
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = engram, "{vector_schema}", pg_temp
        AS $fn$
        DECLARE
            teams text[] := ARRAY(SELECT t.team FROM engram.team_members t WHERE t.member = session_user);
            dims integer := CASE WHEN query IS NULL THEN 1 ELSE vector_dims(query) END;
            filter text := 'm.status = ''active'' AND m.team = ANY ($8) AND ($7 IS NULL OR m.project_key = $7)';
            vec text := 'SELECT NULL::text AS id, NULL::float8 AS cosine WHERE false';
            lex text := 'SELECT NULL::text AS id, NULL::float8 AS lexical WHERE false';
            elems text[];
            freqs real[];
            kept text[] := '{{}}';
            rarest text;
            rarest_freq float8 := 2;
            word text;
            word_freq float8;
            any_words text;
            all_words text;
        BEGIN
            IF exact THEN
                PERFORM set_config('enable_indexscan', 'off', true);
            ELSE
                IF current_setting('hnsw.iterative_scan', true) IS NOT NULL THEN
                    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
                END IF;
                PERFORM set_config('hnsw.ef_search', ef::text, true);
            END IF;
            IF query IS NOT NULL AND model IS NOT NULL THEN
                vec := format('SELECT m.id, 1 - (m.embedding::vector(%1$s) <=> $1::vector(%1$s)) AS cosine
                               FROM engram.memories m WHERE %2$s AND m.embedding_model = $2
                               AND m.embedding IS NOT NULL
                               ORDER BY m.embedding::vector(%1$s) <=> $1::vector(%1$s) LIMIT $5', dims, filter);
            END IF;
            -- The words' score is ts_rank over term frequencies, its length normalised (1: divided by 1 + the log
            -- of the memory's length), as BM25 weighs them locally; cheaper than cover density (ts_rank_cd).
            -- Words in more than `common` of the memories (ANALYZE's element statistics) are left out, as local
            -- search leaves out words in half of them: ranking every memory that holds one costs more than it
            -- tells. If every word is that common, the rarest stays.
            SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs INTO elems, freqs
            FROM pg_stats s WHERE s.schemaname = 'engram' AND s.tablename = 'memories' AND s.attname = 'search';
            FOREACH word IN ARRAY coalesce(words, '{{}}') LOOP
                SELECT coalesce(max(freqs[array_position(elems, lexeme)]), 0) INTO word_freq
                FROM unnest(tsvector_to_array(to_tsvector('english', word))) AS lexeme;
                IF NOT EXISTS (SELECT 1 FROM unnest(tsvector_to_array(to_tsvector('english', word)))) THEN
                    CONTINUE;  -- a stop word
                END IF;
                IF word_freq < common THEN
                    kept := kept || word;
                ELSIF word_freq < rarest_freq THEN
                    rarest := word;
                    rarest_freq := word_freq;
                END IF;
            END LOOP;
            IF cardinality(kept) = 0 AND rarest IS NOT NULL THEN
                kept := ARRAY[rarest];
            END IF;
            IF cardinality(kept) > 0 THEN
                any_words := array_to_string(kept, ' | ');
                all_words := array_to_string(kept, ' & ');
                lex := format('WITH matched AS (
                                   (SELECT m.id FROM engram.memories m
                                    WHERE %1$s AND m.search @@ to_tsquery(''english'', $4) LIMIT $6)
                                   UNION
                                   (SELECT m.id FROM engram.memories m
                                    WHERE %1$s AND m.search @@ to_tsquery(''english'', $3) LIMIT $6))
                               SELECT m.id, ts_rank(m.search, to_tsquery(''english'', $3), 1)::float8 AS lexical
                               FROM matched JOIN engram.memories m USING (id) ORDER BY 2 DESC LIMIT $5', filter);
            END IF;
            RETURN QUERY EXECUTE format(
                'WITH vec AS (%1$s), lex AS (%2$s), ids AS (SELECT vec.id FROM vec UNION SELECT lex.id FROM lex)
                 SELECT m.id, m.owner, m.machine_id, m.team, m.project_key, m.project, m.kind, m.importance,
                        m.status, m.summary, m.full_content, m.created_at,
                        coalesce(vec.cosine, CASE WHEN $1 IS NOT NULL AND m.embedding_model = $2
                                                   AND vector_dims(m.embedding) = %3$s
                                              THEN 1 - (m.embedding::vector(%3$s) <=> $1::vector(%3$s)) END,
                                 0)::float8,
                        coalesce(lex.lexical, 0)::float8
                 FROM ids JOIN engram.memories m ON m.id = ids.id
                 LEFT JOIN vec ON vec.id = m.id LEFT JOIN lex ON lex.id = m.id', vec, lex, dims)
            USING query, model, any_words, all_words, top_k, cap, in_project, teams;
        END
        $fn$
        """
    )


def p004_instance(cur: Cursor) -> None:
    # Which shared database this is: a machine whose shared_database_url comes to name another one must pull
    # it from the start and push every memory to it, not carry on with the old one's sequence numbers.
    cur.execute(
        """
        CREATE TABLE engram.instance (
            id         text PRIMARY KEY DEFAULT gen_random_uuid()::text,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO engram.instance DEFAULT VALUES;
        """
    )


def p005_lessons(cur: Cursor) -> None:
    # Issue 32: what makes a memory tellable on another machine — the miner that made it, the failure it tells
    # the fix of (key, signature, the fix in a line, the words it adds, the sessions and machines that met it),
    # the agent it was learned in (processor/share/lessons.py) — as one JSON object, so a newer client's fields
    # travel through an older one untouched. Additive: older clients neither send nor read it, and an update of
    # theirs keeps it. A forget drops it, whoever forgets (theirs do not name the column: the trigger does it).
    cur.execute(
        """
        ALTER TABLE engram.memories ADD COLUMN lesson jsonb
            CHECK (lesson IS NULL OR (jsonb_typeof(lesson) = 'object' AND octet_length(lesson::text) <= 65536));
        CREATE FUNCTION engram.tombstone_without_lesson() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            NEW.lesson := NULL;
            RETURN NEW;
        END
        $fn$;
        CREATE TRIGGER memories_tombstone_lesson BEFORE INSERT OR UPDATE ON engram.memories FOR EACH ROW
            WHEN (NEW.status = 'forgotten' AND NEW.lesson IS NOT NULL)
            EXECUTE FUNCTION engram.tombstone_without_lesson();
        ALTER TABLE engram.memories ADD CONSTRAINT memories_tombstone_no_lesson
            CHECK (status <> 'forgotten' OR lesson IS NULL);
        """
    )


def vector_index_name(model: str) -> str:
    import hashlib

    return "memories_hnsw_" + hashlib.sha1(model.encode()).hexdigest()[:12]


def vector_index_statement(model: str, dims: int) -> str:
    """The HNSW index for one embedding model's vectors (cosine), as ``engram share init`` makes it."""
    literal = model.replace("'", "''")
    return (f"CREATE INDEX IF NOT EXISTS {vector_index_name(model)} ON engram.memories USING hnsw "
            f"((embedding::vector({int(dims)})) vector_cosine_ops) WHERE embedding_model = '{literal}'")


MIGRATIONS: list[Migration] = [
    p001_memories,
    p002_messages,
    p003_team_search,
    p004_instance,
    p005_lessons,
]
# Migrations an older client may ignore (see the module's docstring): recorded in engram.additions.
ADDITIVE = frozenset({"p005_lessons"})


def latest_version() -> int:
    """The schema version this client knows (the number of its last migration)."""
    return len(MIGRATIONS)


def version_of(migration: Migration) -> int:
    return int(migration.__name__[1:4])


def grants(database: str, person: str = "PERSON", team: str = "TEAM") -> str:
    """What a database owner runs once per person (and per team) so they can use shared memory."""
    return "\n".join([
        f"-- once per person ({person}: their database role; they keep its password in ~/.pgpass or",
        "-- $ENGRAM_HOME/env as PGPASSWORD, never in config.toml):",
        f"CREATE ROLE {person} LOGIN;  -- then: \\password {person}",
        f"GRANT CONNECT, TEMPORARY ON DATABASE {database} TO {person};",
        f"GRANT USAGE ON SCHEMA engram TO {person};",
        f"GRANT SELECT ON engram.migrations, engram.teams, engram.instance TO {person};",
        f"GRANT SELECT, INSERT, UPDATE ON engram.memories, engram.machines TO {person};",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON engram.shared_projects, engram.messages TO {person};",
        f"GRANT SELECT, DELETE ON engram.team_members TO {person};",
        f"GRANT USAGE, SELECT ON SEQUENCE engram.change_seq TO {person};",
        "-- once per team, and once per member of it:",
        team_statements(team, person),
    ])


def team_statements(team: str, person: str, *, new_team: bool = True) -> str:
    """What the database owner runs to put a person in a team (making the team first if new_team)."""
    quoted = team.replace("'", "''")
    make = f"INSERT INTO engram.teams (name) VALUES ('{quoted}') ON CONFLICT DO NOTHING;\n" if new_team else ""
    return make + f"INSERT INTO engram.team_members (team, member) VALUES ('{quoted}', '{person}');"


class SchemaNewer(Exception):
    """The shared database was upgraded by a newer Engram than this one."""


class NoVector(Exception):
    """The server has no pgvector, or this database lacks the extension and this role may not add it."""


def extension_state(cur: Cursor) -> tuple[str | None, str | None]:
    """(installed version of `vector` in this database, version the server could install); None when absent."""
    cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    row = cur.fetchone()
    installed = row[0] if row else None
    cur.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
    row = cur.fetchone()
    return installed, (row[0] if row else None)


def required_versions(cur: Cursor) -> list[int]:
    """The migrations a client must know to use this database (every one but the additive); [] before
    `engram share init`."""
    cur.execute("SELECT to_regclass('engram.migrations') IS NOT NULL")
    if not cur.fetchone()[0]:
        return []
    cur.execute("SELECT version FROM engram.migrations ORDER BY version")
    return [row[0] for row in cur.fetchall()]


def applied_versions(cur: Cursor) -> list[int]:
    """Every migration this database has, additive ones included; [] before `engram share init`."""
    versions = required_versions(cur)
    cur.execute("SELECT to_regclass('engram.additions') IS NOT NULL")
    if cur.fetchone()[0]:
        cur.execute("SELECT version FROM engram.additions")
        versions += [row[0] for row in cur.fetchall()]
    return sorted(versions)


def missing_versions(applied: list[int]) -> list[int]:
    """The migrations this client knows that the database lacks (`engram share init` applies them)."""
    have = set(applied)
    return [version_of(m) for m in MIGRATIONS if version_of(m) not in have]


def migrate(conn: Any) -> list[str]:
    """Create or upgrade the schema in one transaction; returns the migrations applied now.

    Raises NoVector when the extension is missing and cannot be created, SchemaNewer when the database
    already has a migration this client must know and does not (an additive one it may ignore), and psycopg's
    InsufficientPrivilege when this role may not create the schema (the caller explains each).
    """
    applied_now: list[str] = []
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        installed, available = extension_state(cur)
        if installed is None:
            if available is None:
                raise NoVector("the server has no pgvector extension")
            try:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except Exception as exc:  # psycopg's InsufficientPrivilege: pgvector is not a trusted extension
                raise NoVector(f"this role may not create the extension: {exc}") from None
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
        if cur.fetchone() is None:
            cur.execute("CREATE SCHEMA engram")
        for table in ("migrations", "additions"):
            cur.execute(f"SELECT to_regclass('engram.{table}') IS NOT NULL")
            if not cur.fetchone()[0]:
                cur.execute(f"CREATE TABLE engram.{table} (version integer PRIMARY KEY, name text NOT NULL, "
                            "applied_at timestamptz NOT NULL DEFAULT now())")
                if table == "additions":  # read by every client, whatever grants it was given (older ones' lack it)
                    cur.execute("GRANT SELECT ON engram.additions TO PUBLIC")
        required = required_versions(cur)
        if required and max(required) > latest_version():
            raise SchemaNewer(f"schema version {max(required)}")
        done = set(applied_versions(cur))
        for migration in MIGRATIONS:
            version = version_of(migration)
            if version in done:
                continue
            migration(cur)
            table = "additions" if migration.__name__ in ADDITIVE else "migrations"
            cur.execute(f"INSERT INTO engram.{table} (version, name) VALUES (%s, %s)", (version, migration.__name__))
            applied_now.append(migration.__name__)
    return applied_now


def ensure_vector_index(conn: Any, model: str, dims: int) -> bool:
    """The HNSW index for this model's vectors, if missing and this role owns the table; True if it exists."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"engram.{vector_index_name(model)}",))
        if cur.fetchone()[0]:
            return True
        cur.execute("SELECT pg_has_role(current_user, tableowner, 'USAGE') FROM pg_tables "
                    "WHERE schemaname = 'engram' AND tablename = 'memories'")
        row = cur.fetchone()
        if not row or not row[0]:
            return False
        cur.execute(vector_index_statement(model, dims))
        return True
