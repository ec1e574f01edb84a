"""Sessions run in git worktrees that are gone by the time Engram reads them: one project, or one per worktree?

    python bench/worktrees.py [--set bookminder|cipher-box ...] [--baseline-ref REF] [--no-baseline]
                              [--keep DIR] [--models-dir DIR] [--json]
    python bench/worktrees.py --source DIR --lived PATH ...   # one project's sessions of your own

People who run sessions in parallel run them in worktrees, and remove them after the merge; ``engram backfill``
reads months of sessions whose worktrees are long gone. This replays real sessions of one project as if each had
run in a worktree of one real repository, removed before the replay, and counts the recurring errors Engram told
(``bench/helped.py``'s automatic moments: a later session's failure that an earlier session met and got past).

The corpus, built from a fixture project of real sessions (``SETS``):
- a real git repository for the project (``bench/testbed/git_repos.py``: ``git init``, one commit of the fixture's
  README, ``origin`` set to the project's GitHub remote), where the project lived;
- each session's folder moved into a worktree, made with ``git worktree add`` and removed with ``git worktree
  remove`` before the replay (the repository and its branches stay):
  - ``cipher-box``: one worktree per branch its sessions ran on (the branch most of a session's lines name), in
    one of six layouts taken in turn — ``<repo>/.claude/worktrees/<name>``, ``<repo>-worktrees/<name>``,
    ``<repo>.worktrees/<name>``, ``../<repo>-<branch>``, ``<repo>/.worktrees/<name>`` and a folder elsewhere that
    only the session's branch ties to the repository; sessions on ``main`` stay in the main checkout, which
    exists (several sessions of one branch share its worktree, as they would);
  - ``bookminder`` (every session on ``main``): each session in a Claude Code ``--worktree`` of its own,
    ``<repo>/.claude/worktrees/<name>`` on a branch ``worktree-<name>``.
- every line rewritten: the project's folder (``/Users/…/cipher-box``) becomes the session's worktree folder,
  wherever it appears (each line's ``cwd``, file paths in tool calls and their output), so paths are those a
  worktree session would have written; bookminder's lines name their worktree's branch instead of ``main``.
  Kept: every line, prompt, tool call, error, timestamp and uuid (``--opportunities`` labels still apply).
  Lost: what differs in a real worktree session beyond its paths — its edits live on their own branch until
  merged, so a later session's files can differ from what this corpus says; the transcripts stay in the
  project's one folder (the replay's unit is a folder; Claude Code would file each worktree's sessions under a
  folder named after it, which Engram does not read: the project comes from each line's ``cwd``).

The replay is ``bench/helped.py``'s (``bench/precision.py``: each session's hooks run with its worktree folder as
``cwd``, gone as it would be at a backfill — the live-session case, where the folder exists, is the easier one).
Baseline, same run: the same replay of the same corpus on the code of ``--baseline-ref`` (default ``house-kit``:
before project identity, each removed worktree its own project). Goal: one project, ≥ 75% of recurring errors told.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.helped import FIXTURES, run_set  # noqa: E402
from bench.precision import DEFAULT_MODELS  # noqa: E402
from bench.testbed.git_repos import add_worktree, make_repo, remove_worktree  # noqa: E402

DATA = REPO / "bench" / "data"
# name: (the fixture's projects folder, where the project lived, its remote, the labelled moments, one worktree
# per session (Claude Code's --worktree) rather than per branch)
SETS = {
    "cipher-box": (FIXTURES / "cipher-box", "/Users/michael/Code/cipher-box", "git@github.com:FSM1/cipher-box.git",
                   DATA / "opportunities-cipher-box.json", False),
    "bookminder": (FIXTURES / "bookminder", "/Users/palimondo/Developer/BookMinder",
                   "git@github.com:palimondo/BookMinder.git", DATA / "opportunities-dev.json", True),
}
LAYOUTS = ("claude", "dash-worktrees", "dot-worktrees", "beside", "dot-inner", "elsewhere")
BASELINE_REF = "house-kit"


def _slug(branch: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", branch).strip("-") or "wt"


def worktree_folder(repo: Path, layout: str, name: str, elsewhere: Path) -> Path:
    return {"claude": repo / ".claude" / "worktrees" / name,
            "dash-worktrees": repo.parent / f"{repo.name}-worktrees" / name,
            "dot-worktrees": repo.parent / f"{repo.name}.worktrees" / name,
            "beside": repo.parent / f"{repo.name}-{name}",
            "dot-inner": repo / ".worktrees" / name,
            "elsewhere": elsewhere / name}[layout]


def _branch_of(path: Path) -> str:
    """The branch most of the session's lines name."""
    counts: collections.Counter[str] = collections.Counter()
    for raw in path.read_bytes().splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("gitBranch"), str) and entry["gitBranch"]:
            counts[entry["gitBranch"]] += 1
    return counts.most_common(1)[0][0] if counts else "main"


def build_corpus(name: str, out: Path, sets: dict = SETS) -> dict:
    """The set's sessions moved into removed worktrees of a real repository (see the module's docstring); returns
    what was made: the projects folder to replay, the repository, each session's worktree and layout."""
    source, lived, remote, _, per_session = sets[name]
    [project_dir] = [p for p in source.iterdir() if p.is_dir() and p.name.startswith("-")]
    readme = source / "README.md"
    repo = make_repo(out / "code" / Path(lived).name, remote=remote,
                     files={"README.md": readme.read_text(encoding="utf-8") if readme.exists() else f"# {name}\n"})
    make_folders(repo, lived, project_dir)
    elsewhere = out / "elsewhere"
    sessions = sorted(p for p in project_dir.glob("*.jsonl"))
    placed: dict[str, tuple[Path, str, str]] = {}  # session → (folder, branch, layout)
    folders: dict[str, Path] = {}  # branch → its worktree
    for path in sessions:
        if per_session:
            name = path.stem[:8]
            branch, layout = f"worktree-{name}", "claude"
        else:
            branch = _branch_of(path)
            if branch == "main":
                placed[path.name] = (repo, branch, "main checkout")
                continue
            name = _slug(branch)
            layout = LAYOUTS[len(folders) % len(LAYOUTS)] if branch not in folders else placed_layout(placed, branch)
        if branch not in folders:
            folders[branch] = add_worktree(repo, worktree_folder(repo, layout, name, elsewhere), branch)
        placed[path.name] = (folders[branch], branch, layout)
    target = out / "projects" / project_dir.name
    target.mkdir(parents=True)
    pattern = re.compile(rb"(?<![\w.-])" + re.escape(lived.encode()) + rb"(?![\w.-])")
    for path in sessions:
        folder, branch, _ = placed[path.name]
        data = pattern.sub(str(folder).encode(), path.read_bytes())
        if per_session:
            data = data.replace(b'"gitBranch":"main"', b'"gitBranch":' + json.dumps(branch).encode())
        (target / path.name).write_bytes(data)
    for folder in folders.values():
        remove_worktree(repo, folder)
    assert not any(folder.exists() for folder in folders.values())
    return {"projects_dir": out / "projects", "repository": repo, "worktrees": len(folders),
            "sessions": {s: {"folder": str(f), "branch": b, "layout": layout} for s, (f, b, layout) in placed.items()}}


def make_folders(repo: Path, lived: str, project_dir: Path) -> int:
    """The project's folders its sessions name (`apps/api/src/` of `<lived>/apps/api/src/x.ts`), made in the
    repository's checkout: the real one had them, and a fix naming a folder the project's checkout lacks is
    retired as gone stale (``processor/memory/stale_fixes.py``). Files are not made (their contents are not in
    the transcripts), but for the activate script of a virtualenv the sessions activate. Returns how many folders
    were made."""
    named = re.compile(re.escape(lived.encode()) + rb"/((?:[\w.@-]+/)+)[\w.@-]+")
    folders: set[str] = set()
    for path in project_dir.glob("*.jsonl"):
        folders.update(m.group(1).decode("utf-8", "replace") for m in named.finditer(path.read_bytes()))
    # The virtualenvs the sessions activate by a relative path (`source .venv/bin/activate`): the real checkout had
    # them (its sessions ran their tools after it), and an environment whose folder a checkout on this machine
    # lacks is not told (``hook_io.set_up_gone``). Their activate scripts are made, empty.
    activated = re.compile(rb"(?:source|\.) (\w[\w.-]*|\.[\w.-]+)/bin/activate(?![\w.])")
    scripts: set[str] = set()
    for path in project_dir.glob("*.jsonl"):
        scripts.update(m.group(1).decode("utf-8", "replace") + "/bin/" for m in activated.finditer(path.read_bytes()))
    made = 0
    for folder in sorted(folders | scripts):
        target = (repo / folder).resolve()
        if folder.startswith((".git/", "../")) or repo.resolve() not in target.parents:
            continue
        target.mkdir(parents=True, exist_ok=True)
        if folder in scripts:
            (target / "activate").touch()
        made += 1
    return made


def placed_layout(placed: dict[str, tuple[Path, str, str]], branch: str) -> str:
    return next(layout for _, b, layout in placed.values() if b == branch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", dest="sets", choices=sorted(SETS), help="default: every one")
    parser.add_argument("--source", type=Path, help="instead: a projects folder holding one project's sessions "
                        "(one worktree per branch), with --lived")
    parser.add_argument("--lived", help="the folder --source's sessions ran in (its lines' cwd)")
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--keep", type=Path, help="build the corpus in DIR and keep it (default: a temporary folder)")
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ["ENGRAM_MODELS_DIR"])
                        if os.environ.get("ENGRAM_MODELS_DIR") else DEFAULT_MODELS)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    baseline = None if args.no_baseline else args.baseline_ref
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", baseline], capture_output=True,
                            text=True).stdout.strip() if baseline else None
    report: dict = {"benchmark": "worktrees", "baseline_ref": baseline, "baseline_commit": commit, "sets": {}}
    if args.source:
        if not args.lived:
            parser.error("--source needs --lived: the folder its sessions ran in")
        sets = {"custom": (args.source, args.lived, None, Path("/nonexistent"), False)}
    else:
        sets = {name: SETS[name] for name in args.sets or sorted(SETS)}
    with tempfile.TemporaryDirectory(prefix="engram-worktrees-") as tmp:
        root = args.keep or Path(tmp)
        for name in sets:
            corpus = build_corpus(name, root / name / "corpus", sets)
            result = run_set(name, [corpus["projects_dir"]], sets[name][3], args.models_dir, root / name,
                             baseline, None, None)
            layouts = collections.Counter(s["layout"] for s in corpus["sessions"].values())
            report["sets"][name] = {"repository": str(corpus["repository"]), "worktrees": corpus["worktrees"],
                                    "sessions_by_layout": dict(layouts),
                                    "projects": _projects(root / name, corpus), **result}
    for name, result in report["sets"].items():
        for who in ("engram", "baseline"):
            if who in result:
                auto = result[who]["automatic"]
                print(f"{name:>10} {who:>8}: recurring errors told {auto['recurring_told']} of "
                      f"{auto['recurring_errors']}; projects in the store: {result['projects'].get(who)}",
                      file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


def _projects(workdir: Path, corpus: dict) -> dict[str, int]:
    """How many projects the replay ended with: this code's, counted in its store; the baseline's replay keeps no
    store, so its count is that code's rule applied to each session's first folder (the folder's git root when it
    exists, else the folder itself)."""
    import sqlite3

    counts = []
    for db in workdir.glob("*-run-*/homes/*/engram.db"):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            counts.append(conn.execute("SELECT count(DISTINCT project) FROM sessions").fetchone()[0])
    first: set[str] = set()
    for path in corpus["projects_dir"].glob("*/*.jsonl"):
        for raw in path.read_bytes().splitlines():
            cwd = json.loads(raw).get("cwd") if raw.strip().startswith(b"{") else None
            if isinstance(cwd, str) and cwd:
                first.add(str(corpus["repository"]) if os.path.isdir(cwd) else cwd)
                break
    return {"engram": sum(counts), "baseline": len(first)}


if __name__ == "__main__":
    sys.exit(main())
