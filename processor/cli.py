"""The `engram` command: parses arguments and calls the library. Nothing here the library can't do."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from processor.config import ConfigError, Settings, ensure_home, load_settings

EXIT_CONFIG = 78  # sysexits EX_CONFIG: the configuration cannot be used

log = logging.getLogger("engram")


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(overrides={"projects_dir": getattr(args, "projects_dir", None)})


def cmd_run(args: argparse.Namespace) -> int:
    from processor.service.daemon import Processor
    from processor.service.logs import setup_logging

    settings = _settings(args)
    ensure_home(settings)
    setup_logging(settings)
    processor = Processor(settings)
    if args.once:
        new = processor.run_once()
        log.info("captured %d new messages", new)
        return 0

    def _on_signal(signum: int, _frame: object) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        processor.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    processor.run()
    return 0


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
    from processor.capture.backfill import backfill
    from processor.capture.discover import TranscriptFilter
    from processor.capture.tailer import Tailer
    from processor.service.logs import setup_logging
    from processor.store import open_store

    settings = _settings(args)
    ensure_home(settings)
    setup_logging(settings, to_stderr=False)
    conn = open_store(settings.db_path)
    try:
        tailer = Tailer(conn, batch_bytes=int(settings.batch_bytes), max_line_bytes=int(settings.max_line_bytes))
        transcript_filter = TranscriptFilter(settings.transcripts_root, settings.agent_workdir)
        report = backfill(tailer, transcript_filter, args.since, _progress_printer())
    finally:
        conn.close()
    print(f"backfill: {report.files} transcripts, {report.lines} lines read, "
          f"{report.messages} new messages, {report.problems} bad lines (see {settings.logs_dir / 'engram.log'})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from processor.service.status import collect_status, format_status

    settings = _settings(args)
    status = collect_status(settings)
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(format_status(status))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        p.add_argument("--projects-dir", help="Claude Code transcripts root (default ~/.claude/projects)")
        return p

    run = add("run", cmd_run, "run the processor in the foreground until SIGINT/SIGTERM")
    run.add_argument("--once", action="store_true", help="capture what is on disk now, then exit")
    backfill = add("backfill", cmd_backfill, "capture all transcript history once, then exit")
    backfill.add_argument("--since", type=float, default=None, metavar="DAYS",
                          help="only transcripts modified within DAYS days (default: all)")
    status = add("status", cmd_status, "show what has been captured")
    status.add_argument("--json", action="store_true", help="machine-readable output")
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
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
