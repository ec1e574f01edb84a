"""The episodizer: a session's captured rounds become episodes, its verbatim pieces and the memories miners find.

The memory thread (``processor/service/memory_thread.py``) runs it; readers (the MCP tools, the CLI, the viewer)
never load it. It works a session a slice at a time: the next complete rounds, about ``EPISODE_SLICE_PIECES``
pieces of them, with what the miners (``processor/memory/miners.py``) find in those rounds, embedded in one call.
Every write commits the episodes together with the progress marker that produced them (and the failures they
met), so a crash redoes work and never skips it. Besides slices: commits, tracker reasons and the user's answers
become episodes of their own (signals), and once a project's session has ended its close-out routine is read again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import apsw

from processor.capture import signals
from processor.clock import now_ms
from processor.memory import supersede
from processor.memory.absent_programs import absent_programs, runs_bare
from processor.memory.absent_programs import finding as absent_finding
from processor.memory.answered import ASKS_THE_USER
from processor.memory.command_text import runs_elsewhere
from processor.memory.environments import finding as environment_finding
from processor.memory.environments import run_inside
from processor.memory.episode_store import EpisodeStore
from processor.memory.failed_calls import Failure, failures_of
from processor.memory.failure_rates import runs_without_fix
from processor.memory.findings import Finding, Round
from processor.memory.guards import forbidden_commands
from processor.memory.identity import content_hash, episode_id
from processor.memory.lessons import is_hook_lesson
from processor.memory.miners import DONE, SAID
from processor.memory.routines import routine, tasks_of
from processor.memory.settled_vars import finding as settled_finding
from processor.memory.settled_vars import settled
from processor.memory.staging import untracked
from processor.memory.stale_fixes import names_removed, ran_clean_without, removed_folders, retirable
from processor.memory.verbatim import RoundPiece, entities_of, group_rounds, round_pieces, summarize
from processor.redaction import redact
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import failures as failures_sql
from processor.store import origins as origins_sql
from processor.store import projects as projects_sql
from processor.store import sessions, write_transaction
from processor.store import signals as signal_sql
from processor.store import tool_calls as tool_call_sql
from processor.store.episodes import Episode, NewEpisode, StoredMessage
from processor.store.queued import MID_TURN
from processor.store.signals import ReadySignal
from processor.store.tool_calls import StoredToolCall

log = logging.getLogger(__name__)
HOOK_SOURCES = 12  # the lines a commit hook's lesson keeps of the refusals it learned from (three lines a refusal)
RECIPES_SCANNED = 2_000  # the project's newest memories looked at for recipes a removed folder made stale

EPISODE_SLICE_PIECES = 16  # episodes embedded per call while the processor runs: ~1 s of model time at most
PAGE_MESSAGES = 2_000  # messages read per step when turning a session's backlog into episodes
# Messages read first for one slice: enough rounds for EPISODE_SLICE_PIECES pieces as sessions write them.
# A slice embeds ~16 pieces, so reading a whole page of a long backlog for it cost a page of Python objects
# per slice (the memory thread's largest transient allocation under load); a round longer than this is
# read with the full page.
SLICE_PAGE_MESSAGES = 256
ROUTINE_SESSIONS = 30  # a project's newest sessions read for its close-out routine
ENVIRONMENT_COMMANDS = 2_000  # a project's newest clean shell commands read for the environment its tools run in
SESSION_RECIPES = 2_000  # a session's newest episodes looked through for a recipe a later round showed wrong
NOT_FOUND_FAILURES = 500  # a project's newest failed shell calls read for the programs not installed where it runs
NOT_FOUND = ("not found", "exit code 127")  # what such a failure says, in lower case
USER_WORDS_AFTER = 8  # the user's messages read after a program was not found, for what they said of it


@dataclass
class Mined:
    """What a slice of rounds taught besides its verbatim pieces: the memories to store, each with the finding it
    was made from (its miner, a lesson's failure), and every failure met, with the finding that tells its fix if
    one does."""

    episodes: list[NewEpisode] = field(default_factory=list)
    findings: dict[str, Finding] = field(default_factory=dict)  # by episode id
    failures: list[tuple[Failure, Finding | None]] = field(default_factory=list)
    calls: list[StoredToolCall] = field(default_factory=list)  # the session's calls the rounds read, in order
    # Fixes a later round of the session replaced: the same failure came back and was got past another way.
    replaced: set[str] = field(default_factory=set)
    retired_recipes: set[str] = field(default_factory=set)  # … and the session's stored recipes through it


@dataclass(frozen=True)
class _SlicePlan:
    """A slice of a session's episodes before its texts are embedded (``Episodizer._plan_slice``)."""

    session_id: str
    project: str | None
    pieces: list[RoundPiece]
    mined: Mined  # the memories the rounds state (preferences, decisions, facts, lessons) and their failures
    through: int  # the last message the slice covers: the progress marker it commits
    more: bool  # complete rounds remain after it

    @property
    def standing(self) -> list[NewEpisode]:
        return self.mined.episodes

    @property
    def texts(self) -> list[str]:
        return [p.full_content for p in self.pieces] + [e.full_content for e in self.standing]


def _drop_recipes_through(mined: Mined, lesson_sources: list[str]) -> None:
    """Take out of the slice a recipe with a step past this lesson's failure (its first sources: the failed
    call's lines): the session met it again after the recipe and got past it another way, so the recipe's way
    round it was not the way (its other steps are told by their own fixes)."""
    failed = set(lesson_sources[:2])
    dropped = {episode_id for episode_id, found in mined.findings.items()
               if found.miner == "recipe" and failed & set(found.source_uuids)}
    if dropped:
        mined.episodes = [e for e in mined.episodes if e.id not in dropped]
        for episode_id in dropped:
            mined.findings.pop(episode_id, None)


def _failed_command(entities: list[str]) -> str | None:
    """The failed command a lesson is about (its ``$ …`` entity): another command that failed alike (`git add` of
    another missing path) may have failed for another reason, and its fix is not this one's."""
    return next((e for e in entities if e.startswith("$ ")), None)


def _signal_finding(signal: ReadySignal) -> Finding:
    """A commit message, tracker reason or answer as a memory: short, and saying what was decided or fixed, so its
    bite is nearly all of it."""
    return Finding(id=episode_id(f"signal:{signal.tool_use_id}"), kind=signals.kind_of(signal.text),
                   summary=summarize(signal.text, ""), full_content=signal.text, entities=entities_of(signal.text),
                   source_uuids=[signal.use_uuid, signal.result_uuid], created_at=signal.ts_ms, miner="signal")


class Episodizer:
    """Turns one thread's store's captured rounds into episodes (the store's connection, embedder and index)."""

    def __init__(self, store: EpisodeStore) -> None:
        self.store = store
        self.conn = store.conn
        self._routine_stamps: dict[str, int] = {}  # project → its newest tool call when its routine was read
        self._environment_stamps: dict[str, int] = {}  # … and when the environment its tools run in was
        self._absent_stamps: dict[str, int] = {}  # … and when the programs not installed where it runs were
        self._settled_stamps: dict[str, int] = {}  # … and when the variables its commands are run with were

    def episodize(self, session_id: str | None = None, final: bool = False,
                  max_pieces: int = EPISODE_SLICE_PIECES) -> int:
        """Turn complete rounds of captured messages into verbatim episodes; returns how many were added."""
        targets = [session_id] if session_id else self.sessions_to_episodize()
        added = 0
        for sid in targets:
            more = True
            while more:
                count, more = self.episodize_slice(sid, final, max_pieces)
                added += count
        return added

    def sessions_to_episodize(self) -> list[str]:
        """Sessions with captured messages outside episodes, or commits and answers waiting to become some."""
        targets = [row[0] for row in sql.sessions_with_new_messages(self.conn)]
        return targets + [sid for sid in signal_sql.sessions_with_ready(self.conn) if sid not in targets]

    def episodize_slice(self, session_id: str, final: bool, max_pieces: int = EPISODE_SLICE_PIECES,
                        between: Callable[[], object] | None = None) -> tuple[int, bool]:
        """Episodes for the session's next complete rounds, about max_pieces of them (at least one round),
        committed with the progress marker; returns (episodes added, whether complete rounds remain).

        Slices keep each embedding call short: the memory thread serves recollections between them
        (and, inside one huge round, between its chunks, through `between`). Messages are read a page
        at a time, so a backlog of any length (a catch-up after downtime) is worked through in steps.
        """
        signal_added = self._signal_episodes(session_id)  # commits, tracker reasons, answers
        plan = self._plan_slice(session_id, final, max_pieces)
        if plan is None:
            return signal_added, False
        blobs: list[bytes] = []
        for start in range(0, len(plan.pieces), max_pieces):
            if start and between is not None:
                between()
            blobs += self.store.vectors_for([p.full_content for p in plan.pieces[start:start + max_pieces]])
        blobs += self.store.vectors_for([e.full_content for e in plan.standing]) if plan.standing else []
        return self._commit_slice(plan, blobs, final) + signal_added, plan.more

    def episodize_sessions(self, session_ids: list[str], final: bool,
                           max_pieces: int = EPISODE_SLICE_PIECES) -> tuple[int, list[str]]:
        """One slice of each of these sessions, their texts embedded in one call (a backfill's many short sessions
        take one decode for several of them, not one each); each slice commits on its own with its progress
        marker. Returns (episodes added, the sessions with complete rounds left)."""
        added = sum(self._signal_episodes(session_id) for session_id in session_ids)
        plans = [plan for session_id in session_ids if (plan := self._plan_slice(session_id, final, max_pieces))]
        texts = [t for plan in plans for t in plan.texts]
        blobs = self.store.vectors_for(texts) if texts else []
        used = 0
        for plan in plans:
            added += self._commit_slice(plan, blobs[used:used + len(plan.texts)], final)
            used += len(plan.texts)
        return added, [plan.session_id for plan in plans if plan.more]

    # --- signals: commits, tracker reasons, answers --------------------------------------------------

    def _signal_episodes(self, session_id: str) -> int:
        """The session's commit messages, tracker reasons and the user's answers, as episodes of their own."""
        ready = signal_sql.ready(self.conn, session_id)
        progress = sql.session_progress(self.conn, session_id)
        if not ready or progress is None or sessions.session_opt_out(self.conn, session_id) == "record":
            return 0
        self.store.check_model()
        project = progress[0]
        blobs = self.store.vectors_for([s.text for s in ready])
        stamp = now_ms()
        rowids: list[int] = []
        with write_transaction(self.conn):
            self.store.record_model()
            for signal, blob in zip(ready, blobs, strict=True):
                found = _signal_finding(signal)
                if sql.get_episode(self.conn, found.id) is None:
                    rowids.append(sql.insert_episode(self.conn, found.episode(session_id, project, stamp), blob))
                    origins_sql.set_origin(self.conn, found.id, found.miner)
            signal_sql.mark_built(self.conn, [s.tool_use_id for s in ready])
        self._supersede(rowids)
        return len(ready)

    # --- a slice: planned (pieces and what the miners found), embedded, committed --------------------

    def _plan_slice(self, session_id: str, final: bool, max_pieces: int) -> _SlicePlan | None:
        """What the session's next slice will store: its rounds' pieces and the memories they state."""
        progress = sql.session_progress(self.conn, session_id)
        if progress is None:
            return None
        project, through = progress
        rounds, full_page = self._next_rounds(session_id, through, final,
                                              SLICE_PAGE_MESSAGES * max(1, max_pieces // EPISODE_SLICE_PIECES))
        if not rounds:
            return None
        self.store.check_model()
        max_chars = self.store.settings.verbatim_max_chars
        pieces: list[RoundPiece] = []
        taken = 0
        for round_messages in rounds:
            round_pieces_ = round_pieces(round_messages, max_chars)
            if pieces and len(pieces) + len(round_pieces_) > max_pieces:
                break
            pieces += round_pieces_
            taken += 1
        mined = self._mine(session_id, project, rounds, taken)
        return _SlicePlan(session_id, project, pieces, mined, rounds[taken - 1][-1].id,
                          taken < len(rounds) or full_page)

    def _mine(self, session_id: str, project: str | None, rounds: list[list[StoredMessage]], taken: int) -> Mined:
        """What the first `taken` rounds state: first what the user said in any of them, then round by round what
        the session found and did (``miners.SAID``, ``miners.DONE``: the order their memories are stored in), and
        every failure they met (fixed or not), to count where it recurs."""
        start = next((m.ts_ms for m in rounds[0] if m.ts_ms is not None), None)
        calls = tool_call_sql.session_calls(self.conn, session_id, since_ms=start) if start is not None else []
        answers = signal_sql.answers(self.conn, [c.tool_use_id for c in calls if c.tool == ASKS_THE_USER])
        read = [Round(messages, calls, rounds[index + 1][0].ts_ms if index + 1 < len(rounds) else None, project,
                      answers) for index, messages in enumerate(rounds[:taken])]
        mined = Mined(calls=[c for c in calls if read and (read[-1].following is None
                                                           or (c.ts_ms or 0) < read[-1].following)])
        stamp = now_ms()
        for miner in SAID:
            for round_ in read:
                for found in miner(round_):
                    self._keep(found, session_id, project, stamp, mined)
        for round_ in read:
            found_here = [found for miner in DONE for found in miner(round_)]
            told = {found.failure.signature: found for found in found_here
                    if found.failure is not None and found.failure.signature and found.failure.session_fixed}
            mined.failures += [(failure, told.get(tuple(failure.signature)))
                               for failure in failures_of(round_.in_round)]
            for found in found_here:
                self._keep(found, session_id, project, stamp, mined)
        return mined

    def _keep(self, found: Finding, session_id: str, project: str | None, stamp: int, mined: Mined) -> None:
        """Plan to store a finding unless it is there already: stored under its id (unless a fix gone stale, to be
        learned again), its words active or about to be added, or (a lesson) its way of failing told by another
        memory."""
        if self._told_by_another(found, project):
            return  # this way of failing already has its memory (or had one, forgotten)
        episode = found.episode(session_id, project, stamp)
        if self._got_past_again(found, episode, session_id, mined):
            return
        known = sql.get_episode(self.conn, episode.id)
        if ((known is not None and (known.status != "stale" or found.failure is None))
                or sql.active_with_hash(self.conn, episode.content_hash, memories_only=True)
                or any(e.content_hash == episode.content_hash or e.id == episode.id for e in mined.episodes)):
            return
        mined.episodes.append(episode)
        mined.findings[episode.id] = found

    def _got_past_again(self, found: Finding, episode: NewEpisode, session_id: str, mined: Mined) -> bool:
        """A way of failing this session already learned a fix of, met again in a later round and got past another
        way: what got past it the first time did not hold (BookMinder ran one spec file by name; the next round
        `pytest specs/` still collected nothing until `pytest.ini` said where the specs are). The later way
        replaces the earlier one — planned in this slice, or stored by an earlier slice of the session — when it
        is the same command that failed; and a commit hook's newer refusal, in any session, replaces what an older
        one said of its checks."""
        if found.failure is None or not found.failure.session_fixed:
            return False
        earlier = next((i for i, e in enumerate(mined.episodes) if e.id == episode.id), None)
        if earlier is not None:
            if mined.episodes[earlier].content_hash != episode.content_hash \
                    and _failed_command(mined.episodes[earlier].entities) == _failed_command(episode.entities):
                first_way = mined.episodes[earlier].source_uuids
                mined.episodes[earlier] = episode
                mined.findings[episode.id] = found
                mined.replaced.add(episode.id)
                _drop_recipes_through(mined, first_way)
            return True
        known = sql.get_episode(self.conn, episode.id)
        # A project's commit hook is one memory whose checks are the newest refusal's: the hook's configuration
        # changes (BookMinder dropped its whitespace checks; ruff's then refused) and the lesson named the old ones.
        newer_refusal = is_hook_lesson(episode.id, episode.project) and known is not None \
            and (episode.created_at or 0) > (known.created_at or 0)
        if known is None or known.status != "active" or content_hash(known.full_content) == episode.content_hash \
                or not (newer_refusal or (known.session_id == session_id
                                          and _failed_command(known.entities) == _failed_command(episode.entities))):
            return False
        if newer_refusal:  # made from every refusal it learned from, newest first: what it is told for
            episode = replace(episode, source_uuids=list(dict.fromkeys(
                episode.source_uuids + known.source_uuids))[:HOOK_SOURCES])
        mined.episodes.append(episode)
        mined.findings[episode.id] = found
        mined.replaced.add(episode.id)
        if not newer_refusal:  # the session's recipe that went round it the first time: stored, to be retired
            failed = set(known.source_uuids[:2])
            through = [ep for ep in sql.episodes_by_id(
                self.conn, list(sql.newest_session_episode_ids(self.conn, session_id, SESSION_RECIPES)))
                if ep.status == "active" and failed & set(ep.source_uuids)]
            origins = origins_sql.origins(self.conn, [ep.id for ep in through])
            mined.retired_recipes |= {ep.id for ep in through if origins.get(ep.id) == "recipe"}
        return True

    def _told_by_another(self, found: Finding, project: str | None) -> bool:
        """A way of failing that already has its memory (or had one, forgotten), other than this finding."""
        if found.kind != "gotcha" or found.failure is None or not found.failure.signature:
            return False
        known = failures_sql.find(self.conn, project, found.failure.key, list(found.failure.signature))
        return known is not None and bool(known.memory_id) and known.memory_id != found.id

    def _commit_slice(self, plan: _SlicePlan, blobs: list[bytes], final: bool) -> int:
        """Store a planned slice with its vectors (pieces', then standing memories'), the failures it met, and
        its progress marker."""
        session_id, project = plan.session_id, plan.project
        stamp = now_ms()
        added = 0
        rowids: list[int] = []
        with write_transaction(self.conn):
            if sessions.session_opt_out(self.conn, session_id) == "record":
                # Went off the record while these rounds were embedded: its messages are gone; so are these.
                return 0
            self.store.record_model()
            for piece, blob in zip(plan.pieces, blobs[:len(plan.pieces)], strict=True):
                if sql.get_episode(self.conn, piece.id) is not None:
                    continue  # written before a crash that lost the progress marker
                rowids.append(sql.insert_episode(self.conn, piece.finding().episode(session_id, project, stamp), blob))
                added += 1
            for episode, blob in zip(plan.standing, blobs[len(plan.pieces):], strict=True):
                # Read again in the transaction: another builder of a backfill (or another session's slice planned
                # beside this one) may have stored the same words, or a memory of the same way of failing.
                found = plan.mined.findings[episode.id]
                known = sql.get_episode(self.conn, episode.id)
                if (known is None
                        and not sql.active_with_hash(self.conn, episode.content_hash, memories_only=True)
                        and not self._told_by_another(found, project)):
                    rowids.append(sql.insert_episode(self.conn, episode, blob))
                    origins_sql.set_origin(self.conn, episode.id, found.miner)
                    added += 1
                elif known is not None and known.status == "stale" and found.failure is not None \
                        and not self._told_by_another(found, project):
                    self._relearn(known, episode, blob, session_id, stamp)
                elif known is not None and episode.id in plan.mined.replaced and known.status == "active":
                    sql.rewrite_episode(self.conn, known.id, episode, blob, dated=True)  # got past another way
                    cold_sql.record_action(self.conn, stamp, "mining", "active", episode_id=known.id,
                                           detail=f"got past another way later in session {session_id}: "
                                                  f"{redact(episode.summary[:120])}")
            for recipe_id in plan.mined.retired_recipes:
                cold_sql.set_status(self.conn, recipe_id, "stale", stamp)
                cold_sql.record_action(self.conn, stamp, "mining", "stale", episode_id=recipe_id,
                                       detail=f"a step's failure came back later in session {session_id} and was "
                                              "got past another way")
            self._record_failures(session_id, project, plan.mined)
            self._note_runs(session_id, project, plan.mined.calls)
            self._retire_unneeded_fixes(session_id, project, plan.mined.calls, stamp)
            sql.set_episodized_through(self.conn, session_id, plan.through)
        self._supersede(rowids)
        if final and not plan.more and project:
            added += self.refresh_routine(project) + self.refresh_environment(project) + self.refresh_absent(project) \
                + self.refresh_settled(project)
        return added

    def _record_failures(self, session_id: str, project: str | None, mined: Mined) -> None:
        """Count each failure of these rounds under its signature, and link the memory that tells its fix (in the
        caller's transaction: the counts move with the progress marker)."""
        for failure, lesson in mined.failures:
            row = failures_sql.record(self.conn, project, failure.fail_key, failure.key, failure.signature,
                                      session_id, failure.call.result_ts_ms or failure.call.ts_ms,
                                      redact(failure.error_line))
            if lesson is not None and lesson.id in mined.replaced:  # a later round's way is the fix it tells
                lesson = mined.findings[lesson.id]
                if lesson.failure is not None and sql.get_episode(self.conn, lesson.id) is not None:
                    failures_sql.relink(self.conn, row.id, lesson.id, redact(lesson.failure.fix), lesson.failure.uses)
                continue
            if lesson is not None and lesson.failure is not None:
                # Its memory, or the same words made elsewhere and pulled here (shared memory): a copy that kept
                # this lesson from being stored again tells it instead.
                teller = lesson.id if sql.get_episode(self.conn, lesson.id) is not None else \
                    sql.active_with_hash(self.conn, content_hash(lesson.full_content), memories_only=True)
                if teller is not None:
                    failures_sql.set_memory(self.conn, row.id, teller, redact(lesson.failure.fix), lesson.failure.uses)
                    origins_sql.set_origin(self.conn, teller, lesson.miner)  # a copy from an older Engram has none

    def _note_runs(self, session_id: str, project: str | None, calls: list[StoredToolCall]) -> None:
        """Count this session among those that ran a failing command without its fix (``failure_rates``: a fix is
        told before its command only while most sessions that run it meet the failure); in the caller's
        transaction, after this slice's failures were counted."""
        if not calls:
            return
        rows = failures_sql.with_memories(self.conn, project)
        runs = runs_without_fix(rows, calls)
        for row in rows:
            if row.id in runs:
                failures_sql.note_runs(self.conn, row, {session_id: runs[row.id]})

    def _retire_unneeded_fixes(self, session_id: str, project: str | None, calls: list[StoredToolCall],
                               stamp: int) -> None:
        """Mark stale the error fixes these calls showed are no longer needed (``stale_fixes``: the command that
        failed ran clean without the fix, or a clean call removed the folder the fix uses), with why (in the
        caller's transaction: the marks move with the progress marker)."""
        if not calls:
            return
        rows = failures_sql.with_memories(self.conn, project)
        root = project if project and project.startswith("/") else None
        gone = removed_folders(calls, root)
        for row in rows if gone else ():
            for folder in names_removed(row.fix, gone, root)[:1]:
                call = gone[folder]
                self._retire(row.memory_id, session_id, stamp, f"what fixed it uses `{folder}/`, which "
                             f"`{redact((call.target or '')[:120])}` removed in session {session_id}")
        if gone:  # a recipe's steps use the removed folder too ("after … not found, `source venv/bin/activate`…")
            memories = sql.project_memories(self.conn, project, RECIPES_SCANNED)
            kinds = origins_sql.origins(self.conn, [ep.id for ep in memories])
            for ep in memories:
                for folder in names_removed(ep.summary, gone, root)[:1] if kinds.get(ep.id) == "recipe" else ():
                    self._retire(ep.id, session_id, stamp, f"its steps use `{folder}/`, which "
                                 f"`{redact((gone[folder].target or '')[:120])}` removed in session {session_id}")
        self._retire_untracked_staging(session_id, project, calls, stamp)
        fixes = retirable(rows, session_id)
        if not fixes:
            return
        failed = {}  # memory id → the command that failed, as the memory writes it (its "$ " entity)
        for fix in fixes:
            ep = sql.get_episode(self.conn, fix.memory_id) if fix.memory_id else None
            command = next((e[2:] for e in ep.entities if e.startswith("$ ")), None) if ep is not None else None
            if command is not None:
                failed[ep.id] = command
        for memory_id, call in ran_clean_without(fixes, failed, calls, session_id).items():
            self._retire(memory_id, session_id, stamp,
                         f"`{redact((call.target or '')[:120])}` ran clean without its fix in session {session_id}")

    def _retire_untracked_staging(self, session_id: str, project: str | None, calls: list[StoredToolCall],
                                  stamp: int) -> None:
        """Mark stale a lesson about what staging everything swept in (``processor/memory/staging.py``) once these
        calls took every path it names out of git's index on purpose (``git rm --cached .DS_Store``)."""
        gone = untracked(calls)
        if not gone:
            return
        memories = sql.project_memories(self.conn, project, RECIPES_SCANNED)
        kinds = origins_sql.origins(self.conn, [ep.id for ep in memories])
        for ep in memories:
            paths = [e for e in ep.entities if not e.startswith("$ ")]
            staged = any(e.startswith(("$ git add", "$ git commit")) for e in ep.entities)
            if kinds.get(ep.id) == "lesson" and staged and paths and all(p.rstrip("/") in gone for p in paths):
                call = gone[paths[0].rstrip("/")]
                self._retire(ep.id, session_id, stamp, f"`{redact(paths[0])}` is no longer tracked: "
                             f"`{redact((call.target or '')[:120])}` in session {session_id}")

    def _relearn(self, known: Episode, episode: NewEpisode, blob: bytes, session_id: str, stamp: int) -> None:
        """A way of failing whose fix went stale met again and got past anew: its memory says the new way and is
        told again (one memory per way of failing; a forgotten one is never made again)."""
        sql.rewrite_episode(self.conn, known.id, episode, blob)
        cold_sql.set_status(self.conn, known.id, "active", stamp)
        cold_sql.record_action(self.conn, stamp, "mining", "active", episode_id=known.id,
                               detail=f"learned again in session {session_id}: {redact(episode.summary[:120])}")

    def _retire(self, memory_id: str | None, session_id: str, stamp: int, reason: str) -> None:
        """Mark an active fix learned in another session stale, recording why; its failures wait for the next fix
        a session finds (the project changed under it: the new way is learned the next time it fails)."""
        ep = sql.get_episode(self.conn, memory_id) if memory_id else None
        if ep is None or ep.status != "active" or ep.session_id == session_id:
            return
        cold_sql.set_status(self.conn, ep.id, "stale", stamp)
        failures_sql.unlink_memory(self.conn, ep.id)
        cold_sql.record_action(self.conn, stamp, "mining", "stale", episode_id=ep.id, detail=reason)

    def _next_rounds(self, session_id: str, through: int, final: bool,
                     first_page: int = SLICE_PAGE_MESSAGES) -> tuple[list[list[StoredMessage]], bool]:
        """The session's complete rounds after message `through`, from a short page (`first_page` messages)
        or, when no round ends within it, a full one; and whether the page read was full (more follow)."""
        for limit in (min(first_page, PAGE_MESSAGES), PAGE_MESSAGES):
            messages = sql.messages_after(self.conn, session_id, through, limit=limit)
            full_page = len(messages) == limit
            # Within a full page the last round may go on in the next page: only `final` on the last page.
            rounds = group_rounds(messages, final and not full_page)
            if rounds or not full_page:
                return rounds, full_page
        return [messages], True  # one round longer than a page: store it rather than stall on it

    # --- after the slices: the project's close-out routine, and what the new episodes supersede --------

    def refresh_routine(self, project: str) -> int:
        """The project's close-out routine (``processor.memory.routines``) as a convention memory, made or
        superseded when its steps changed; returns 1 when a new one was stored."""
        stamp = tool_call_sql.project_stamp(self.conn, project)
        if self._routine_stamps.get(project) == stamp:
            return 0
        self._routine_stamps[project] = stamp
        recent = tool_call_sql.project_sessions_with_calls(self.conn, project, ROUTINE_SESSIONS)
        rules = [ep.summary for ep in sql.project_memories(self.conn, project, 2_000)
                 if ep.kind in ("convention", "decision", "preference") and not ep.summary.startswith("Close-out")]
        found = routine(project, {sid: tasks_of(tool_call_sql.session_calls(self.conn, sid),
                                               tool_call_sql.prompt_times(self.conn, sid)) for sid in recent},
                        forbidden_commands(rules))
        return 0 if found is None else self._replace_project_memory(project, f"routine:{project}", found,
                                                                    "close-out routine")

    def refresh_environment(self, project: str) -> int:
        """The environment the project's tools run in (``processor.memory.environments.run_inside``) as a memory,
        made or superseded when it changed and retired when no program is left; returns 1 when one was stored."""
        stamp = tool_call_sql.project_stamp(self.conn, project)
        if self._environment_stamps.get(project) == stamp:
            return 0
        self._environment_stamps[project] = stamp
        # A command that went to another project's folder first ran that project's tools (a sibling checkout's
        # `source venv/bin/activate`): not where this project's run.
        folders = [project, *projects_sql.paths_of(self.conn, project)] if project.startswith("/") else []
        found = run_inside(command for command in
                           tool_call_sql.clean_commands_with(self.conn, project, None, ENVIRONMENT_COMMANDS)
                           if not runs_elsewhere(command, folders))
        meta_key = f"environment:{project}"
        if found is not None:
            return self._replace_project_memory(project, meta_key, environment_finding(project, found, now_ms()),
                                                "environment")
        previous = sql.get_meta(self.conn, meta_key)
        if previous:
            with write_transaction(self.conn):
                self._retire(previous, "", now_ms(), "no program of the project was last run inside it any more")
                sql.set_meta(self.conn, meta_key, "")
        return 0

    def refresh_absent(self, project: str) -> int:
        """The programs not installed where the project's sessions run (``processor.memory.absent_programs``), a
        memory each: made or replaced when what it says changed, retired once the program ran clean here; returns
        how many were stored."""
        stamp = tool_call_sql.project_stamp(self.conn, project)
        if self._absent_stamps.get(project) == stamp:
            return 0
        self._absent_stamps[project] = stamp
        failed = tool_call_sql.failed_commands_saying(self.conn, project, NOT_FOUND, NOT_FOUND_FAILURES)

        def runs_clean(program: str) -> bool:
            return any(runs_bare(command, program) for command in
                       tool_call_sql.clean_commands_with(self.conn, project, program, ENVIRONMENT_COMMANDS))

        found = absent_programs(failed, runs_clean, self._same_prompt_after, project, self._user_words_after)
        list_key = f"absent:{project}"
        before = json.loads(sql.get_meta(self.conn, list_key) or "[]")
        added = sum(self._replace_project_memory(project, f"{list_key}:{absent.program}",
                                                 absent_finding(project, absent, now_ms()), "not installed")
                    for absent in found)
        now = [absent.program for absent in found]
        with write_transaction(self.conn):
            for program in before:
                if program not in now and (previous := sql.get_meta(self.conn, f"{list_key}:{program}")):
                    self._retire(previous, "", now_ms(), redact(f"`{program}` ran clean here"))
                    sql.set_meta(self.conn, f"{list_key}:{program}", "")
            if before != now:
                sql.set_meta(self.conn, list_key, json.dumps(now))
        return added

    def refresh_settled(self, project: str) -> int:
        """The variables the project's commands came to be run with (``processor.memory.settled_vars``), a memory
        a command: made or replaced when a newer session settled on others; returns how many were stored."""
        stamp = tool_call_sql.project_stamp(self.conn, project)
        if self._settled_stamps.get(project) == stamp:
            return 0
        self._settled_stamps[project] = stamp
        found = settled(tool_call_sql.clean_calls_assigning(self.conn, project, ENVIRONMENT_COMMANDS))
        return sum(self._replace_project_memory(project, f"settled:{project}:{s.core}", settled_finding(project, s),
                                                "settled variables") for s in found)

    def _same_prompt_after(self, call: StoredToolCall) -> list[StoredToolCall]:
        """The calls its session made after `call`, up to the session's next prompt."""
        at = call.ts_ms or 0
        following = next((t for t in tool_call_sql.prompt_times(self.conn, call.session_id) if t > at), None)
        calls = tool_call_sql.session_calls(self.conn, call.session_id, since_ms=at,
                                            until_ms=None if following is None else following - 1)
        ids = [c.tool_use_id for c in calls]
        return calls[ids.index(call.tool_use_id) + 1:] if call.tool_use_id in ids else calls

    def _user_words_after(self, call: StoredToolCall) -> list[str]:
        """What the user said right after `call`: what they typed while the agent went on (handed over mid-turn),
        and their next message."""
        words: list[str] = []
        for message in sql.user_messages_after(self.conn, call.session_id, call.ts_ms or 0, USER_WORDS_AFTER):
            words.append(message.text)
            if not message.uuid.startswith(MID_TURN):
                break  # the next prompt: what follows it answers the agent's next turn
        return words

    def _replace_project_memory(self, project: str, meta_key: str, found: Finding, what: str) -> int:
        """The one memory of its kind a project has (its close-out routine, the environment its tools run in),
        named by `meta_key`: stored when it changed, superseding the one before; returns 1 when it was stored."""
        previous = sql.get_meta(self.conn, meta_key)
        if found.id == previous or sql.get_episode(self.conn, found.id) is not None:
            return 0
        [blob] = self.store.vectors_for([found.full_content])
        stamp_ms = now_ms()
        with write_transaction(self.conn):
            if sql.get_episode(self.conn, found.id) is not None:
                return 0  # stored meanwhile by another builder of this backfill
            self.store.record_model()
            sql.insert_episode(self.conn, found.episode(None, project, stamp_ms), blob)
            origins_sql.set_origin(self.conn, found.id, found.miner)
            if previous and (old := sql.get_episode(self.conn, previous)) is not None and old.status == "active":
                sql.supersede(self.conn, previous, found.id, stamp_ms)
            sql.set_meta(self.conn, meta_key, found.id)
        log.info("%s of %s: %s", what, project, found.summary)
        return 1

    def _supersede(self, rowids: list[int]) -> None:
        """Older episodes these new ones state a change about are superseded (``processor.memory.supersede``)."""
        if not rowids:
            return
        try:
            changes = supersede.detect(self.conn, self.store.index, rowids, self.store.settings.supersede_similarity)
            done = supersede.apply(self.conn, changes, now_ms())
        except apsw.BusyError:
            log.info("database busy; supersession of %d new episodes not checked", len(rowids))
            return
        if done:
            log.info("%d older episode(s) superseded by newer ones that state a change", done)
