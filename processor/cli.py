"""The `engram` command: parses arguments and calls the library. Nothing here the library can't do."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from processor.config import AGENT_NAMES, AGENTS, ConfigError, Settings, ensure_home, load_settings
from processor.memory.errors import EmbedderError
from processor.memory.kinds import KINDS, SCOPES
from processor.store.errors import NotEngramDatabase

EXIT_CONFIG = 78  # sysexits EX_CONFIG: the configuration cannot be used

log = logging.getLogger("engram")


def _settings(args: argparse.Namespace, *, create_home: bool = True) -> Settings:
    """The settings for this command; the data home is created here, once, for commands that write."""
    settings = load_settings(overrides={"projects_dir": getattr(args, "projects_dir", None)})
    if create_home:
        ensure_home(settings)
    return settings


def cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:
        from processor.jobs import dry_run

        dry_run(_settings(args))
        return 0
    if args.once:
        from processor.service.logs import setup_logging
        from processor.service.run_loop import Processor

        settings = _settings(args)
        setup_logging(settings)
        report, episodes = Processor(settings).run_once(settings.recent_days)
        log.info("captured %d conversation lines; %d new episodes", report.messages, episodes)
        return 0
    from mcp_tools.host import McpHost
    from processor.lifecycle import run_service

    return run_service({"projects_dir": args.projects_dir}, mock=args.mock, tools=McpHost)


def _progress_printer() -> Callable[[int, int, Path], None]:
    if sys.stderr.isatty():
        def show(done: int, total: int, path: Path) -> None:
            width = 30
            filled = width * done // max(total, 1)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} transcripts")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
    else:
        def show(done: int, total: int, path: Path) -> None:
            print(f"{done}/{total} {path}", file=sys.stderr, flush=True)
    return show


def cmd_backfill(args: argparse.Namespace) -> int:
    from processor.service.logs import setup_logging
    from processor.service.run_loop import Processor

    settings = _settings(args)
    setup_logging(settings, to_stderr=False)
    report, episodes = Processor(settings).run_once(args.since, _progress_printer())
    print(f"backfill: {report.files} transcripts, {report.lines} lines read, {report.messages} new messages, "
          f"{episodes} new episodes, {report.problems} bad lines (see {settings.logs_dir / 'engram.log'})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from processor.status import current_status, format_status

    status = current_status(_settings(args, create_home=False))
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(format_status(status))
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    import webbrowser

    from processor.service import control_client
    from processor.viewer.serve import LOGIN_PATH, serve_read_only

    settings = _settings(args)
    try:
        url = control_client.request(settings.run_dir, "POST", LOGIN_PATH)["url"]
    except control_client.NotRunning:
        # No processor: serve the viewer ourselves, read-only, until Ctrl-C. The database is migrated first
        # so that a read-only connection finds every table.
        from processor.store import open_store

        open_store(settings.db_path).close()
        print("engram: the processor is not running; serving the viewer read-only until Ctrl-C", file=sys.stderr)
        return serve_read_only(settings, open_browser=not args.no_browser,
                               ready=lambda link: print(f"Viewer (one-time login link): {link}", flush=True))
    print(f"Viewer (one-time login link): {url}")
    if not args.no_browser and not webbrowser.open(url):
        print("engram: no browser found; open the link above yourself", file=sys.stderr)
    return 0


def _episode_store(settings: Settings):
    from processor.memory.episode_store import EpisodeStore
    from processor.store import open_store

    return EpisodeStore(settings, open_store(settings.db_path))


def _recall_team(args: argparse.Namespace) -> int:
    """The team's memories on the shared database, searched there (processor/share/team_search.py)."""
    from processor.recall.format import format_hits
    from processor.share.errors import ShareError
    from processor.share.team_search import search_team

    settings = _settings(args)
    try:
        hits = search_team(settings, _episode_store(settings).embedder, args.query,
                           limit=args.limit or settings.recall_limit, project=args.project)
    except ShareError as exc:
        raise ValueError(str(exc)) from None
    print(json.dumps([h.__dict__ for h in hits], indent=2) if args.json else format_hits(hits))
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    from processor.lookup import recall_output

    if args.scope == "team":
        return _recall_team(args)
    settings = _settings(args, create_home=False)  # created only if the search runs here
    limit = args.limit or settings.recall_limit
    print(recall_output(settings, args.query, limit=limit, project=args.project, as_json=args.json))
    return 0


def cmd_expand(args: argparse.Namespace) -> int:
    from processor.lookup import expand_output

    print(expand_output(_settings(args, create_home=False), args.id, as_json=args.json))
    return 0


def _before_ms(text: str | None) -> int | None:
    if not text:
        return None
    from datetime import UTC, datetime

    try:
        day = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--before {text!r} is not a date; use YYYY-MM-DD (UTC)") from None
    return int((day if day.tzinfo else day.replace(tzinfo=UTC)).timestamp() * 1000)


def cmd_forget(args: argparse.Namespace) -> int:
    from processor.clock import utc_date
    from processor.recall import forget

    settings = _settings(args)
    store = _episode_store(settings)
    if args.id:
        if args.query or args.before:
            raise ValueError("give one memory's id, or --query/--before for several, not both")
        if args.dry_run:
            episode = store.expand(args.id, touch=False)
            print(f"would forget {episode.id}: {episode.summary}")
            return 0
        erased = forget.forget(store, settings, args.id, args.reason)
        for episode in erased:
            print(f"forgot {episode.id}: {episode.summary}")
        return 0
    plan = store.plan_forget(query=args.query, before_ms=_before_ms(args.before), project=args.project)
    if not plan.episodes:
        print("nothing to forget: no memory matches")
        return 0
    # What would be erased comes first, always: a bulk erase is never blind.
    print(f"{'would forget' if args.dry_run else 'to forget'}: {len(plan.episodes)} memories"
          + (" (more match: run again after this)" if plan.truncated else ""))
    for episode in plan.episodes:
        print(f"  {episode.id}  [{utc_date(episode.created_at)}, {episode.kind}] {episode.summary[:100]}")
    if args.dry_run:
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print("engram forget: not forgetting without confirmation; add --yes (or --dry-run to only look)",
                  file=sys.stderr)
            return 1
        answer = input(f"Forget these {len(plan.episodes)} memories? This cannot be undone [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing forgotten")
            return 1
    erased = forget.forget_planned(store, settings, plan, args.reason)
    print(f"forgot {len(erased)} memories (earlier versions included)")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    store = _episode_store(_settings(args))
    count = store.reindex()
    print(f"re-embedded {count} episodes with {store.embedder.model_id} ({store.embedder.dim} dims)")
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    from processor.capture.project import project_root
    from processor.capture.remember_inbox import RememberRequest, write_remember_file

    settings = _settings(args)
    project = args.project or (project_root(os.getcwd()) if args.scope != "global" else None)
    path = write_remember_file(settings.queue_dir, RememberRequest(args.text, args.kind, args.scope, project))
    print(f"queued {path.name}; the processor stores it (run `engram run` if it is not running)")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from processor.install import agents
    from processor.install.registration import InstallError, default_registration

    try:
        if args.command == "uninstall":
            outcomes = agents.uninstall(agents.chosen(args.agent, uninstall=True), dry_run=args.print)
        else:
            registration = dataclasses.replace(default_registration(), prompt_submit=args.prompt_submit)
            names = agents.chosen(args.agent)
            for name in [n for n in agents.AGENTS if args.agent == "all" and n not in names]:
                print(f"== {AGENT_NAMES[name]}: not installed here, so nothing is written for it "
                      f"(`engram install --agent {name}` registers it anyway)")
            outcomes = agents.install(names, registration, dry_run=args.print, trust=args.trust)
    except InstallError as exc:
        print(f"engram {args.command}: {exc}", file=sys.stderr)
        return 1
    for outcome in outcomes:
        # An agent's error once, on stderr (its header says which agent and that nothing was changed).
        print(outcome.describe(), end="", file=sys.stderr if outcome.error is not None else sys.stdout)
    return 1 if any(o.error is not None for o in outcomes) else 0


def cmd_plugin(args: argparse.Namespace) -> int:
    from processor.install.plugin import write_plugin

    for path in write_plugin(Path(args.out)):
        print(path)
    folder = Path(args.out).resolve()
    print(f"start Claude Code with: claude --plugin-dir {folder}")
    print(f"or keep it installed: /plugin marketplace add {folder}  then  /plugin install engram@engram-local")
    return 0


def cmd_service(args: argparse.Namespace) -> int:
    from processor.service import units

    settings = _settings(args)
    try:
        if args.action == "install":
            result = units.install(settings.home, settings.logs_dir, print_only=args.print,
                                   restart_sec=settings.service_restart_seconds,
                                   memory_max_mb=settings.service_memory_max_mb, nice=settings.service_nice)
        elif args.action == "uninstall":
            result = units.uninstall(print_only=args.print)
        elif args.action == "status":
            result = units.status()
        elif args.action == "restart":
            result = units.restart()
        else:
            if args.follow:
                argv = units.logs_command(settings.logs_dir, follow=True)
                os.execvp(argv[0], argv)  # hand the terminal to tail/journalctl
            result = units.logs(settings.logs_dir)
    except units.ServiceError as exc:
        print(f"engram service {args.action}: {exc}", file=sys.stderr)
        return 1
    if args.action == "install" and args.print:
        print(result.text, end="" if result.text.endswith("\n") else "\n")
    for argv in result.commands:
        print(("would run: " if getattr(args, "print", False) else "ran: ") + " ".join(argv), file=sys.stderr)
    for note in result.notes:
        print(note, file=sys.stderr)
    if result.output:
        print(result.output, end="" if result.output.endswith("\n") else "\n")
    return 0 if result.returncode == 0 else 1


def cmd_extract(args: argparse.Namespace) -> int:
    from processor.jobs import run_once

    run_once(_settings(args), mock=args.mock)
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    from processor.jobs.review_cli import choose, format_review, list_open, walk

    settings = _settings(args)
    if args.id is not None:
        if args.choose is None:
            raise ValueError("engram review ID needs --choose N (the option's number); "
                             "`engram review --list` shows them")
        print(choose(settings, args.id, args.choose))
        return 0
    if args.list or args.json or not sys.stdin.isatty():
        reviews = list_open(settings)
        if args.json:
            print(json.dumps(reviews, indent=2))
        else:
            print("\n".join(format_review(r) for r in reviews) or "No open reviews.")
        return 0
    walk(settings)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from processor.jobs.stats import collect_stats, format_stats
    from processor.store import open_store

    settings = _settings(args)
    conn = open_store(settings.db_path)
    try:
        stats = collect_stats(conn)
    finally:
        conn.close()
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    # Runs before load_settings: a broken config.toml is one of the things it reports.
    from processor.doctor import exit_code, format_report, run_checks

    checks = run_checks()
    print(format_report(checks))
    return exit_code(checks)


def cmd_share(args: argparse.Namespace) -> int:
    from processor.service.logs import setup_logging
    from processor.service.units import load_env_file
    from processor.share import commands
    from processor.share.errors import ShareError

    settings = _settings(args)
    setup_logging(settings, to_stderr=False)
    load_env_file(settings.home / "env")  # PGPASSWORD and the like, as the processor reads them
    try:
        if args.action == "init":
            outcome = commands.init(settings, grants_for=args.grants_for, team=args.team,
                                    new_id=args.new_machine_id, claim_id=args.claim_machine_id)
        elif args.action == "status":
            outcome = commands.status(settings, network=not args.offline)
        elif args.action == "push":
            outcome = commands.push(settings)
        elif args.action == "pull":
            outcome = commands.pull(settings)
        elif args.action == "project":
            if args.team is None and not args.no_team:
                raise ValueError("engram share project needs --team NAME (or --no-team to stop sharing it)")
            outcome = commands.share_project(settings, args.path, None if args.no_team else args.team)
        else:
            if not args.team:
                raise ValueError("engram share leave needs --team NAME")
            outcome = commands.leave(settings, args.team, withdraw=args.withdraw)
    except ShareError as exc:
        print(f"engram share {args.action}: {exc.problem}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(outcome.data, indent=2))
    else:
        print("\n".join(outcome.lines))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from mcp_tools.bridge import main as serve

    return serve()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram", description=f"Engram: memory for coding agents ({', '.join(AGENT_NAMES.values())}).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        p.add_argument("--projects-dir", help="Claude Code transcripts root (default ~/.claude/projects)")
        return p

    run = add("run", cmd_run, "run the processor in the foreground until SIGINT/SIGTERM")
    run.add_argument("--once", action="store_true", help="capture what is on disk now, then exit")
    run.add_argument("--mock", action="store_true", help="LLM jobs use canned structured outputs (no network)")
    run.add_argument("--dry-run", action="store_true",
                     help="print which LLM jobs would be queued and why, then exit without running anything")
    backfill = add("backfill", cmd_backfill, "capture all transcript history once, then exit")
    backfill.add_argument("--since", type=float, default=None, metavar="DAYS",
                          help="only transcripts modified within DAYS days (default: all)")
    status = add("status", cmd_status, "show what has been captured")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    recall = add("recall", cmd_recall, "search memories (the same search as the memory_recall MCP tool)")
    recall.add_argument("query")
    recall.add_argument("--project", help="project root to search with the global memories (default: all)")
    recall.add_argument("--limit", type=int, default=0, help="how many results (default: recall_limit)")
    recall.add_argument("--scope", choices=["local", "team"], default="local",
                        help="team: search your teams' memories on the shared database (shared memory)")
    recall.add_argument("--json", action="store_true")
    expand = add("expand", cmd_expand, "show a memory's full content and where it came from")
    expand.add_argument("id")
    expand.add_argument("--json", action="store_true")
    forget = add("forget", cmd_forget, "forget a memory, or every memory matching --query/--before: the content is "
                                       "erased, the id remembers it was forgotten")
    forget.add_argument("id", nargs="?", help="one memory's id (ep_…)")
    forget.add_argument("--query", help="forget the memories containing all these words")
    forget.add_argument("--before", metavar="DATE", help="forget the memories made before this day (YYYY-MM-DD, UTC)")
    forget.add_argument("--project", help="only this project's memories (its root path)")
    forget.add_argument("--dry-run", action="store_true", help="only show what would be forgotten")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--reason", help="why (kept with the forgotten id)")
    add("reindex", cmd_reindex, "remake verbatim episodes with the current builder (ids people acted on are kept), "
        "then re-embed every memory with the configured embedding model")
    remember = add("remember", cmd_remember, "queue a memory for the processor to store (like memory_remember)")
    remember.add_argument("text")
    remember.add_argument("--kind", choices=KINDS)
    remember.add_argument("--scope", choices=SCOPES)
    remember.add_argument("--project", help="project root (default: the git root of the current directory)")

    for name, help_text in (("install", "register Engram's hooks and MCP server with each agent found here ("
                                        f"{', '.join(AGENT_NAMES.values())})"),
                            ("uninstall", "remove exactly what `engram install` added")):
        p = add(name, cmd_install, help_text)
        p.add_argument("--print", action="store_true", help="show the change without writing anything")
        p.add_argument("--agent", choices=[*AGENTS, "all"],
                       help="only this agent (install's default: every agent found on this machine; "
                            "uninstall's: every agent)")
        if name == "install":
            p.add_argument("--prompt-submit", action=argparse.BooleanOptionalAction, default=None,
                           help="register (--no-prompt-submit: remove) the optional prompt hook (UserPromptSubmit, "
                                "the Gemini CLI's BeforeAgent); it stays inert until prompt_submit_enabled is true")
            p.add_argument("--no-trust", dest="trust", action="store_false",
                           help="Codex: do not record the trust of Engram's hooks (trust them in Codex: /hooks)")
    plugin = add("plugin", cmd_plugin, "write a Claude Code plugin folder (for `claude --plugin-dir`)")
    plugin.add_argument("--out", required=True, help="folder to write the plugin into")
    service = add("service", cmd_service, "run the processor as a launchd (macOS) or systemd (Linux) user service")
    service.add_argument("action", choices=["install", "uninstall", "status", "logs", "restart"])
    service.add_argument("--print", action="store_true", help="install/uninstall: show, change nothing")
    service.add_argument("--follow", "-f", action="store_true", help="logs: keep following")
    add("mcp", cmd_mcp, "serve the MCP tools over stdio (what Claude Code starts)")
    share = add("share", cmd_share, "shared memory on PostgreSQL: init the schema, status, push/pull once, share a "
                                    "project with a team, leave a team")
    share.add_argument("action", choices=["init", "status", "push", "pull", "project", "leave"])
    share.add_argument("path", nargs="?", help="project: the project's folder (default: the current directory)")
    share.add_argument("--team", help="project: share it with this team; leave: the team to leave; "
                                      "init: the team name in the printed grants")
    share.add_argument("--no-team", action="store_true", help="project: stop sharing it with any team")
    share.add_argument("--withdraw", action="store_true",
                       help="leave: also make your memories shared with the team private again")
    share.add_argument("--grants-for", metavar="ROLE", help="init: print the grants for this database role")
    share.add_argument("--new-machine-id", action="store_true",
                       help="init: give this Engram home a machine id of its own (a copied home)")
    share.add_argument("--claim-machine-id", action="store_true",
                       help="init: take over this home's machine id (the same home moved to a new path or host)")
    share.add_argument("--offline", action="store_true", help="status: only what this machine knows (no network)")
    share.add_argument("--json", action="store_true", help="machine-readable output")
    extract = add("extract", cmd_extract, "queue due extraction jobs and run the LLM queue until idle, then exit")
    extract.add_argument("--mock", action="store_true", help="canned structured outputs, no network")
    review = add("review", cmd_review, "walk the pending reviews (numbered options, s skip, q quit), or list / choose")
    review.add_argument("id", nargs="?", type=int, help="a review's id (with --choose)")
    review.add_argument("--choose", type=int, metavar="N", help="apply option N of review ID")
    review.add_argument("--list", action="store_true", help="list the open reviews and exit")
    review.add_argument("--json", action="store_true", help="with --list: machine-readable output")
    stats = add("stats", cmd_stats, "memories by project, kind and status; sweeps, verdicts, reviews, spend")
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    add("doctor", cmd_doctor, "check the installation; prints the fix for every problem")
    view = add("open", cmd_open,
               "open the web viewer in the browser (read-only, in the foreground, if no processor runs)")
    view.add_argument("--no-browser", action="store_true", help="only print the one-time login link")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Everything Engram writes is private to the user: files 0600, directories 0700.
    os.umask(0o077)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"engram: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except NotEngramDatabase as exc:  # another program's file at the database path: nothing was written
        print(f"engram: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (LookupError, ValueError) as exc:  # unknown ids, empty input: the message says what to do
        print(f"engram: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    except EmbedderError as exc:
        print(f"engram: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
