"""Does what a memory cites still exist in the code? The inquisitor's deterministic pass, with git and no model.

For one project at a time: ``git ls-files`` at HEAD (plus the file on disk), one ``git grep -w``
for every cited symbol at once, the renames and deletions in ``git log`` since the oldest memory,
and, for a symbol that vanished, the diff that removed it (``git log -S``) to find what it was
renamed to. Every git call runs in the project's root with a time limit and an output cap, so a
huge repository costs a bounded amount; a root that is gone or not a repository is reported, not raised.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass

from processor.memory.citations import Citations

log = logging.getLogger(__name__)

OUTPUT_CAP = 8 * 1024 * 1024  # bytes read from one git call; the rest is cut (and said so)
MAX_SYMBOL_SEARCHES = 20      # single-symbol `git log -S` calls per pass (after the batched one)
MAX_RENAME_SYMBOLS = 300
SYMBOLS_PER_GREP = 500      # vanished symbols searched in one batched `git log -S`


class RepoUnavailable(Exception):
    """The project's root is gone, or not a git repository: nothing can be checked there now."""


def git(root: str, args: list[str], timeout: float, cap: int = OUTPUT_CAP) -> tuple[int, str]:
    """(exit status, stdout cut at cap bytes) of one git call in root; raises RepoUnavailable on a timeout."""
    try:
        proc = subprocess.Popen(["git", "-C", root, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, env={**os.environ, "GIT_TERMINAL_PROMPT": "0",
                                                               "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    except OSError as exc:
        raise RepoUnavailable(f"cannot run git: {exc}") from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RepoUnavailable(f"git {args[0]} took longer than {timeout:g} s in {root}") from None
    if len(out) > cap:
        log.info("git %s in %s printed %d bytes; only the first %d are read", args[0], root, len(out), cap)
        out = out[:cap]
    return proc.returncode, out.decode("utf-8", "replace")


@dataclass(frozen=True)
class Finding:
    """The deterministic verdict on one memory: valid | fix | stale | uncertain | skipped."""

    verdict: str
    reason: str
    replacements: tuple[tuple[str, str], ...] = ()  # (old, new) for a fix
    evidence: str = ""


class RepoSnapshot:
    """What one project's repository says at HEAD, gathered with a handful of bounded git calls."""

    def __init__(self, root: str, timeout: float = 10.0) -> None:
        if not root or not os.path.isdir(root):
            raise RepoUnavailable(f"the project's folder {root!r} does not exist on this machine")
        self.root = root
        self.timeout = timeout
        code, top = git(root, ["rev-parse", "--show-toplevel"], timeout)
        if code != 0:
            raise RepoUnavailable(f"{root} is not a git repository")
        code, head = git(root, ["rev-parse", "--verify", "-q", "HEAD"], timeout)
        if code != 0:
            raise RepoUnavailable(f"{root} has no commit yet")
        self.head = head.strip()
        code, branch = git(root, ["symbolic-ref", "-q", "--short", "HEAD"], timeout)
        self.detached = code != 0  # checked at the commit all the same; noted in the reason
        code, listing = git(root, ["ls-files", "-z"], timeout)
        self.files = frozenset(f for f in listing.split("\0") if f)
        self._basenames = {os.path.basename(f) for f in self.files}
        self._dirs = {os.path.dirname(f) for f in self.files}
        self.renamed: dict[str, str] = {}
        self.deleted: dict[str, str] = {}
        self.symbols_present: set[str] = set()
        self.renames: dict[str, tuple[str, str]] = {}  # vanished symbol → (new name, commit)
        self._searched: set[str] = set()
        self.touched: dict[str, list[int]] = {}  # path → times of the commits since load_history's time

    def load_history(self, since_ms: int) -> None:
        """Renames and deletions since a time (the oldest memory checked), newest last."""
        since = f"--since=@{max(since_ms // 1000 - 60, 0)}"
        code, out = git(self.root, ["log", "-M", "--reverse", "--name-status", "--format=commit %h %ct", since],
                        self.timeout)
        commit, when = "", 0
        for line in out.splitlines():
            if line.startswith("commit "):
                _, commit, stamp = (line.split(" ") + ["0"])[:3]
                when = int(stamp) * 1000 if stamp.isdigit() else 0
                continue
            parts = line.split("\t")
            if len(parts) >= 2:  # every file a commit touched, for "what changed since the memory"
                self.touched.setdefault(parts[-1], []).append(when)
            if parts[0].startswith("R") and len(parts) == 3:
                old, new = parts[1], parts[2]
                for key, value in list(self.renamed.items()):  # a → b then b → c: a → c
                    if value == old:
                        self.renamed[key] = new
                self.renamed[old] = new
                self.deleted.pop(new, None)
            elif parts[0] == "D" and len(parts) == 2:
                self.deleted[parts[1]] = commit
            elif parts[0] == "A" and len(parts) == 2:
                self.deleted.pop(parts[1], None)

    def load_symbols(self, symbols: set[str]) -> None:
        """Which of these identifiers occur as whole words anywhere at HEAD: `git grep -w -E (a|b|…)`.

        One alternation per chunk of symbols: git's fixed-string search with a thousand patterns is
        ten times slower than one extended regex with the same names.
        """
        names = sorted(s for s in symbols if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s))
        found: set[str] = set()
        for start in range(0, len(names), SYMBOLS_PER_GREP):
            chunk = names[start:start + SYMBOLS_PER_GREP]
            code, out = git(self.root, ["grep", "-I", "-o", "-h", "-w", "--no-color", "-E",
                                        "(" + "|".join(chunk) + ")", "HEAD", "--"], self.timeout)
            found.update(line.strip() for line in out.splitlines())
        self.symbols_present = found & symbols

    def has_path(self, path: str) -> bool:
        path = path.rstrip("/")
        if path in self.files or path in self._dirs or os.path.exists(os.path.join(self.root, path)):
            return True
        if "/" not in path:  # a bare name: anywhere in the tree
            return path in self._basenames
        return any(f.endswith("/" + path) for f in self.files)

    def _moved(self, path: str) -> str | None:
        if path in self.renamed:
            return self.renamed[path]
        for old, new in self.renamed.items():
            if old.endswith("/" + path) or ("/" not in path and os.path.basename(old) == path):
                return new if "/" in path else os.path.basename(new)
        return None

    def _deleted_in(self, path: str) -> str | None:
        if path in self.deleted:
            return self.deleted[path]
        for old, commit in self.deleted.items():
            if old.endswith("/" + path) or ("/" not in path and os.path.basename(old) == path):
                return commit
        return None

    def find_renames(self, symbols: set[str], since_ms: int) -> None:
        """For symbols missing at HEAD: what the diffs that removed them put in their place.

        One `git log -S` (pickaxe, all the symbols as one regex) walks the history since the oldest
        memory once; only the files whose count of a symbol changed are printed, cut at 4 MB.
        """
        wanted = sorted(s for s in symbols if s not in self.symbols_present)[:MAX_RENAME_SYMBOLS]
        if not wanted:
            return
        regex = "(" + "|".join(re.escape(s) for s in wanted) + ")"
        code, out = git(self.root, ["log", "-p", "-U0", "--pickaxe-regex", f"-S{regex}", "--format=commit %h",
                                    f"--since=@{max(since_ms // 1000 - 60, 0)}", "--"], self.timeout, cap=4 << 20)
        words = {s: re.compile(rf"\b{re.escape(s)}\b") for s in wanted}
        commit = ""
        removed: list[str] = []
        added: list[str] = []

        def settle() -> None:
            for old in removed:
                for symbol, word in words.items():
                    if symbol in self.renames or not word.search(old):
                        continue
                    pattern = r"(\w+)".join(re.escape(p) for p in word.split(old))
                    for new in added:
                        m = re.fullmatch(pattern, new)
                        if m and len(set(m.groups())) == 1 and m.group(1) != symbol:
                            self.renames[symbol] = (m.group(1), commit)
                            break

        for line in out.splitlines():
            if line.startswith("commit ") or line.startswith("@@") or line.startswith("diff "):
                settle()
                removed, added = [], []
                if line.startswith("commit "):
                    commit = line[7:]
            elif line.startswith("-") and not line.startswith("---"):
                removed.append(line[1:])
            elif line.startswith("+") and not line.startswith("+++"):
                added.append(line[1:])
        settle()
        for symbol, (new, _) in list(self.renames.items()):
            if new not in self.symbols_present and not self._occurs(new):
                del self.renames[symbol]  # renamed, then removed too: not a fix

    def renamed_symbol(self, symbol: str, since_ms: int) -> tuple[str, str] | None:
        """(new name, commit) when the diff that removed `symbol` put another identifier in its place."""
        if symbol not in self._searched:
            self._searched.add(symbol)
            self.find_renames({symbol}, since_ms)
        return self.renames.get(symbol)

    def _occurs(self, symbol: str) -> bool:
        code, out = git(self.root, ["grep", "-q", "-w", "-F", "-e", symbol, "HEAD", "--"], self.timeout, cap=1024)
        return code == 0

    def changed_since(self, paths: list[str], since_ms: int) -> int:
        """Commits touching these paths since a time, from the history load_history read (no git call)."""
        return sum(1 for p in paths for when in self.touched.get(p, ()) if when >= since_ms - 60_000)


def check(snapshot: RepoSnapshot, citations: Citations, since_ms: int, *, symbol_budget: list[int] | None = None,
          look_for_changes: bool = True) -> Finding:
    """The deterministic verdict on one memory's citations at the snapshot's HEAD."""
    if not citations.paths and not citations.symbols:
        return Finding("skipped", "cites no file or symbol")
    fixes: list[tuple[str, str]] = []
    gone: list[str] = []
    unsure: list[str] = []
    for path in citations.paths:
        if snapshot.has_path(path):
            continue
        moved = snapshot._moved(path)
        if moved and snapshot.has_path(moved):
            fixes.append((path, moved))
            continue
        commit = snapshot._deleted_in(path)
        if commit:
            gone.append(f"{path} was deleted in {commit}")
        else:
            unsure.append(f"{path} is not in the repository at HEAD (never tracked, or outside it)")
    for symbol in citations.symbols:
        if symbol in snapshot.symbols_present:
            continue
        budget = symbol_budget if symbol_budget is not None else [MAX_SYMBOL_SEARCHES]
        found = snapshot.renames.get(symbol)
        if found is None and symbol not in snapshot._searched and budget[0] > 0:
            budget[0] -= 1
            found = snapshot.renamed_symbol(symbol, since_ms)
        if found:
            fixes.append((symbol, found[0]))
        else:
            unsure.append(f"`{symbol}` no longer occurs in the code")
    at = snapshot.head[:12] + (" (detached HEAD)" if snapshot.detached else "")
    if gone:
        return Finding("stale", "; ".join(gone) + f" (checked at {at})", evidence="; ".join(unsure))
    if unsure:
        return Finding("uncertain", "; ".join(unsure) + f" (checked at {at})", tuple(fixes))
    if fixes:
        return Finding("fix", "; ".join(f"{a} is now {b}" for a, b in fixes) + f" (at {at})", tuple(fixes))
    changed = snapshot.changed_since(list(citations.paths), since_ms) if look_for_changes else 0
    note = f"; {changed} commit(s) touched the cited files since" if changed else ""
    return Finding("valid", f"every citation exists at {at}{note}", evidence=str(changed))


def head_commit_fast(root: str | None) -> str | None:
    """HEAD's commit read from the .git files (no subprocess): what the scheduler compares; None if unknown."""
    if not root:
        return None
    try:
        dot_git = os.path.join(root, ".git")
        git_dir = dot_git
        if os.path.isfile(dot_git):
            with open(dot_git, encoding="utf-8") as f:
                first = f.readline().strip()
            git_dir = os.path.normpath(os.path.join(root, first.removeprefix("gitdir:").strip()))
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as f:
            head = f.read(4096).strip()
        if not head.startswith("ref:"):
            return head or None  # detached
        ref = head[4:].strip()
        common = git_dir
        if os.path.isfile(os.path.join(git_dir, "commondir")):
            with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as f:
                common = os.path.normpath(os.path.join(git_dir, f.read().strip()))
        for folder in (git_dir, common):
            path = os.path.join(folder, ref)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    return f.read(100).strip() or None
        with open(os.path.join(common, "packed-refs"), encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except (OSError, UnicodeDecodeError):
        return None
    return None
