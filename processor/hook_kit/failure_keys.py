"""A failed tool call's signature: what it was (its call key) and how it failed (its error, normalised).

The same failure seen twice rarely prints the same bytes: another branch name, another path, another line
number, a new timestamp. Its signature keeps what stays (the program and subcommand, the words of the error
lines) and masks what changes (paths, numbers, ids and hashes, file names). The processor files what fixed a
failure under its call key with its signature (``processor/memory/lessons.py``, ``processor/recall/
lesson_index.py``); the PostToolUseFailure hook computes the signature of a failure as it happens and looks
for one an earlier session fixed (``recall_hook/tool_failure.py``), with these functions on both sides.

- ``call_key``: ``cmd:<program subcommand>`` of the command that failed (of a chain, the one the error names,
  else the last), or ``tool:<name>`` for any other tool (a Read past its size limit, an MCP tool's error);
  ``failure_key``: the index key its failures are filed under, by program (``fail:git``, ``fail:tool:Read``);
- ``signature``: up to three error lines (those that say what went wrong, never ``exit code 1`` alone), each
  lower-cased, punctuation and leaders trimmed, paths, numbers, ids and file names masked;
- ``same_failure``: two signatures share a line, or lines of five words or more that differ in one word (the
  name of a branch: ``the current branch <b> has no upstream branch``), or name the same program not found
  (zsh's ``command not found: psql`` is bash's ``psql: command not found``);
- ``call_signature``: a shell call that said only ``Exit code 127`` (its message thrown away) is known as its
  program not found.

A call the user declined, an interrupted call and the editor's own mechanics (an edit whose text was not
found, a file not read first) are not failures of anything: ``not_a_failure``.

Stdlib only and no ``re``: the hook's start-up is its cost.
"""

if __package__:
    from .hook_io import READ_REFUSAL, SUB_AGENT_TOOLS
    from .tool_keys import RUNNERS, command_keys
else:  # the hook's folder is on sys.path
    from hook_io import READ_REFUSAL, SUB_AGENT_TOOLS
    from tool_keys import RUNNERS, command_keys

MAX_LINES = 3
MAX_WORDS = 14
SCANNED_LINES = 40
# Words an error line says (English): a line holding one says what went wrong.
CUES = ("error", "fatal", "failed", "failure", "not found", "no such", "cannot", "can't", "denied", "refused",
        "invalid", "unknown", "unexpected", "exceeds", "rejected", "modified by", "missing", "unable", "ignored",
        "not allowed", "no module", "not recognized", "unrecognized", "blocked", "does not exist", "doesn't exist",
        "no upstream", "conflict", "abort", "timed out", "exception", "usage:", "not a ", "permission",
        "did not match", "not set", "undefined",
        # A test run that ran nothing (``processor/capture/captured.py`` ``ran_nothing``): its call exited 0.
        "no tests", "no test files", "collected 0 items", "ran 0 tests", "no projects matched")
# Lines that say only that something failed, not what: never a signature.
_BARE = ("exit code", "traceback", "error", "failed", "failure", "fatal", "exception", "warning")
# Tools whose failures are the editor's own mechanics or the agent's planning, not what the project taught.
MECHANICS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "TodoWrite", "TodoRead", "ExitPlanMode",
                       "exit_plan_mode", "AskUserQuestion", "Task", "BatchTool", "Agent"})
# What a call the user declined says in place of its output, and one interrupted or not permitted: it never ran.
_DECLINED = ("doesn't want to proceed", "user doesn't want", "user denied", "was rejected by the user")
_NOT_RUN = (*_DECLINED, "request interrupted", "interrupted by user", "haven't granted", "permission to use",
            "requires approval")
_TRIM = "'\"`()[]{}<>,;:.!?*|│─╰╭╮╯├┤"


# What an error says when the path it was given is not there (a Read's "File does not exist.", a shell's
# "No such file or directory", node's ENOENT): where the project's file of that name is may be told
# (``where_files.py``, loaded only then).
PATH_MISSING = ("no such file or directory", "does not exist", "doesn't exist", "enoent", "cannot find the path")


# What git says when the branch a checkout or switch names is not there.
BRANCH_MISSING = ("did not match any file", "invalid reference")


def says_missing(error: str) -> bool:
    """Whether the error says a path it was given is not there (or a shell glob matched nothing)."""
    lowered = error[:2000].lower()
    return "no matches found" in lowered or any(marker in lowered for marker in PATH_MISSING)


def says_path_missing(lowered_error: str) -> bool:
    """Whether a lowered error says a path it was given is not there, as a shell, git (``pathspec … did not match
    any files``) or a test runner (pytest's ``file or directory not found``) says it."""
    return says_missing(lowered_error) or "did not match any file" in lowered_error \
        or "file or directory not found" in lowered_error


# The agent's harness refusing a read for the file's size (Claude Code's Read: "File content (56293 tokens) exceeds
# maximum allowed tokens (25000)"), in a read's own result or that of a call that ran others (a sub-agent, ``Task``;
# the old ``BatchTool``) and met it.
SUB_AGENTS = (*SUB_AGENT_TOOLS, "BatchTool")  # and the old batch tool, whose result said so as an error


def read_refused(tool_name: object, error: str) -> bool:
    """Whether a failed call is a read the harness refused for the file's size: a read, or a sub-agent whose
    result says one of its reads was."""
    return tool_name in ("Read", "NotebookRead", *SUB_AGENTS) and READ_REFUSAL in error[:4000].lower()


def declined(error: str | None) -> bool:
    """Whether a call's "error" is the user declining it (not a program's failure, not an interruption)."""
    head = (error or "")[:400].lower()
    return any(marker in head for marker in _DECLINED)


def not_a_failure(tool_name: object, error: str) -> bool:
    """A declined or interrupted call, or the editor's mechanics: nothing about the project failed."""
    if not isinstance(tool_name, str) or tool_name in MECHANICS:
        return True
    head = error[:400].lower()
    return any(marker in head for marker in _NOT_RUN)


def _word(raw: str) -> str | None:
    """One word of an error line, masked: None for punctuation alone."""
    word = raw.strip(_TRIM)
    if not word or not any(c.isalnum() for c in word):
        return None
    if "/" in word or "\\" in word or word[0] == "~":
        return "<path>"
    if any(c.isdigit() for c in word):
        return "<n>" if all(c.isdigit() or c in ".,:-" for c in word) else "<id>"
    dot = word.rfind(".")
    if 0 < dot < len(word) - 1 and len(word) - dot <= 6 and word[dot + 1:].isalnum():
        return "<file>"
    return word


def normalise(line: str) -> str:
    """An error line as its signature holds it."""
    text = line.lower()
    while "..." in text:
        text = text.replace("...", " ")
    words: list[str] = []
    for raw in text.split():
        word = _word(raw)
        if word is None or (words and word == words[-1] and word[0] == "<"):
            continue
        words.append(word)
    return " ".join(words[:MAX_WORDS])


def _message(error: str) -> str:
    """The error without Claude Code's ``Error:`` wrapper (the tool's own output follows it)."""
    text = error.strip()
    return text[6:].lstrip() if text[:6].lower() == "error:" else text


def _says_what(line: str) -> bool:
    """Three words or more, two of them words (not masks); or a word and an error's own long name
    (``error: externally-managed-environment``)."""
    words = line.split()
    plain = [w for w in words if w[0] != "<"]
    named = len(plain) >= 2 and any(len(w) >= 12 and w not in _BARE for w in plain)
    return (len(words) >= 3 or named) and len(plain) >= 2 and line not in _BARE \
        and not line.startswith(("exit code", "traceback"))


# A hook runner's progress lines (lint-staged's "[SKIPPED] Skipped because of errors from tasks."): every refusal
# of it prints them, whatever failed; its "[FAILED] <check>" line and the check's own output say what, and
# husky's own line under any of its hooks' refusals ("husky - pre-commit script failed (code 1)") says only that.
_PROGRESS = ("[started]", "[completed]", "[skipped]", "husky - ")
_TRACEBACK = "Traceback (most recent call last)"
# What Python prints between chained tracebacks: it says they are chained, not what failed.
_CHAINING = ("During handling of the above exception", "The above exception was the direct cause")


def exception_line(error: str) -> str | None:
    """A Python traceback's exception line, the one that names the error (``KeyError: 'port'``; of a chain of
    tracebacks, the last one's); None when the error holds no traceback. Its frames (``  File …`` and their
    source lines) are indented; the exception line is the first line after them that is not."""
    lines = error[-8000:].splitlines()
    start = max((i for i, line in enumerate(lines) if line.lstrip().startswith(_TRACEBACK)), default=None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())  # a traceback printed indented (a log, a runner)
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            return line.strip()
    return None


def _outside_tracebacks(lines: list[str]) -> list[str]:
    """The lines that are no traceback's header, frames (their source lines would read as errors) or chaining."""
    kept: list[str] = []
    indent: int | None = None  # the traceback's own indentation while within its frames
    for line in lines:
        depth = len(line) - len(line.lstrip())
        if line.lstrip().startswith(_TRACEBACK):
            indent = depth
            continue
        if indent is not None and depth > indent:
            continue
        indent = None
        if not line.lstrip().startswith(_CHAINING):
            kept.append(line)
    return kept


def signature(error: str) -> list[str]:
    """The error's signature lines (at most three); [] when nothing in it says what went wrong. A Python
    traceback is known by its exception line first, never by its frames."""
    found: list[str] = []
    lines = [line for line in _message(error[:8000]).splitlines()[:SCANNED_LINES] if line.strip()]
    raised = exception_line(error)
    if raised is not None:
        lines = _outside_tracebacks(lines)
        named = normalise(raised)
        if named and named not in _BARE:
            found.append(named)  # "keyerror port": the exception's name says what, even in two words
    for line in lines:
        lowered = line.lower()
        if not any(cue in lowered for cue in CUES) or lowered.lstrip().startswith(_PROGRESS):
            continue
        normal = normalise(line)
        if _says_what(normal) and normal not in found and len(found) < MAX_LINES:
            found.append(normal)
            if len(found) == MAX_LINES:
                break
    # No English cue (another language, a terse tool): the first line, if it says much — past Claude Code's
    # `Exit code 1`, which only says that it failed; a sentence, not a row of a table a status query printed
    # (`gh pr checks`: "E2E Tests<tab>fail<tab>2m13s<tab>https://…", the state of CI, not the call's failure).
    first = next((line for line in lines if not _exit_status(line)), None) if not found else None
    if first is not None and "\t" not in first and "://" not in first:
        first = normalise(first)
        if _says_what(first) and len(first.split()) >= 4:
            found.append(first)
    return found


def _exit_status(line: str) -> bool:
    """A line that says only how the call exited (``Exit code 1``, ``exit status 2``)."""
    words = line.lower().replace(":", " ").split()
    return 2 <= len(words) <= 4 and "exit" in words and any(w.isdigit() for w in words)


def exit_127_only(error: str) -> bool:
    """The error says nothing but the shell's exit status 127 (a program it could not find): its own message went
    to ``2>/dev/null`` or a redirect (``Exit code 127``)."""
    lines = [line.lower().split() for line in _message(error[:400]).splitlines() if line.strip()]
    return bool(lines) and all("127" in words and len(words) <= 4 and ("exit" in words or "status" in words
                                                                       or "code" in words) for words in lines)


def call_signature(tool_name: object, command: str | None, error: str) -> list[str]:
    """A failed call's signature (``signature``); a shell call that said only ``Exit code 127`` is known as its
    program not found, the way the shell would have said it had its message not been thrown away."""
    found = signature(error)
    if found or tool_name != "Bash" or not exit_127_only(error):
        return found
    key = call_key(tool_name, command, error)
    return [f"command not found {program_of(key)}"] if key and key.startswith("cmd:") else []


# What an error says when what a program needs is not where it ran: a module, a package, the environment itself
# (Python's "externally-managed-environment" outside a virtualenv).
_WANTS = ("not found", "no module named", "modulenotfounderror", "cannot find module", "externally-managed",
          "is not installed", "cannot import name")


def wants_environment(error: str) -> bool:
    """Whether a failed call's error says something it needed is missing (a module, a program, the environment)."""
    lowered = error[:4000].lower()
    return any(cue in lowered for cue in _WANTS)


def missing_program_of(line: str) -> str | None:
    """The program a short "not found" line names, whichever shell said it: zsh's ``command not found: psql``,
    bash's ``psql: command not found``, sh's ``psql: not found``, pnpm's ``Command "biome" not found``."""
    words = line.split()
    if len(words) > 7:
        return None
    for i in range(len(words) - 1):
        if words[i] == "not" and words[i + 1] == "found":
            if i + 2 < len(words):
                named = words[i + 2]
            elif i >= 2 and words[i - 1] == "command":
                named = words[i - 2]
            else:
                named = words[i - 1] if i >= 1 else ""
            return named if named and named[0] != "<" and named != "command" else None
    return None


def _lines_match(a: str, b: str) -> bool:
    if a == b:
        return True
    missing = missing_program_of(a)
    if missing is not None and missing == missing_program_of(b):
        return True  # the same program not found, told by another shell
    left, right = a.split(), b.split()
    if len(left) != len(right) or len(left) < 5:
        return False
    return sum(x != y for x, y in zip(left, right, strict=True)) <= 1


def same_failure(a: list[str], b: list[str]) -> bool:
    """Whether two signatures are the same failure: a line in common (up to one word, in a long line)."""
    return any(_lines_match(x, y) for x in a for y in b)


def program_of(key: str) -> str:
    """The program a ``cmd:`` key runs, past its runner (``uv run pytest``, ``python -m pytest`` → ``pytest``)."""
    words = _command_words(key)
    return words[0] if words else key[4:]


def _command_words(key: str) -> list[str]:
    """The program and its subcommand words of a ``cmd:`` key, past its runner (``uv run pytest`` → ``pytest``;
    ``uv venv`` is uv's own subcommand and stays)."""
    words = key[4:].split()
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1:]
    if len(words) > 1 and words[0] in RUNNERS:
        runner = RUNNERS[words[0]]
        if not runner:
            return words[1:]
        if words[1] == runner:
            return words[2:]
    return words


def another_go(key: str, other: str) -> bool:
    """Whether `other` runs what `key` ran: the same program and, when both name one, the same subcommand
    (``git add`` is not another go at ``git commit``; ``pytest`` is one at ``pytest specs``)."""
    if not key.startswith("cmd:") or not other.startswith("cmd:"):
        return key == other
    mine, theirs = _command_words(key), _command_words(other)
    if not mine or not theirs or mine[0] != theirs[0]:
        return False
    return len(mine) < 2 or len(theirs) < 2 or mine[1] == theirs[1]


def failure_key(key: str, error: str = "") -> str:
    """Where the failures of a call are filed: by its program (``fail:git``), not its arguments: the signature
    tells ``git push``'s missing upstream from ``git commit``'s hook, and a test run whose key caught a word of
    its arguments (``pytest specs``) still meets its program's failures. When the error names another word of
    the command as what is missing (``python -m pytest``: ``command not found: python``), the failure is that
    word's: ``python -c …`` meets it too."""
    if not key.startswith("cmd:"):
        return "fail:" + key
    lowered = error[:2000].lower()
    if refused_cd(lowered) or failed_cd(lowered):
        return CD_REFUSED  # the `cd` was refused or its folder was not there, whatever the command went on to run
    program = program_of(key)
    if lowered and program not in lowered:
        for word in key[4:].split():
            if len(word) >= 2 and word != program and word[0].isalpha() and _names_missing(lowered, word):
                return "fail:" + word
    hooked = _hook_missing(error[:2000])
    if hooked and hooked != program:
        return "fail:" + hooked
    return "fail:" + program


def _hook_missing(error: str) -> str | None:
    """The program a hook or script the command ran says is missing, as its own line puts it: pre-commit's hook
    "`pre-commit` not found.  Did you forget to activate your virtualenv?" (a `git commit` that failed so is
    that program not found), a script's ``./build.sh: line 3: jq: command not found``."""
    for line in error.splitlines()[:SCANNED_LINES]:
        line = line.strip()
        if line.lower().startswith("error: "):
            line = line[7:].lstrip()
        if line.startswith("`") and "` not found" in line:
            name = line[1:line.index("` not found")]
        elif ": line " in line and line.endswith(": command not found"):
            name = line[:-len(": command not found")].rsplit(": ", 1)[-1]
        else:
            continue
        if name and len(name) <= 40 and name[0].isalpha() and all(c.isalnum() or c in "-_." for c in name):
            return name
    return None


# Where a `cd` the agent's harness refused, or one whose folder was not there, is filed: the same failure whichever
# program the command ran after it (Claude Code: "cd to '/tmp' was blocked. For security, Claude Code may only
# change directories to child directories of the original working directory"; zsh: "cd:1: no such file or
# directory: app"). The signature tells the two apart.
CD_REFUSED = "fail:cd"


def failed_cd(lowered_error: str) -> bool:
    """Whether a failed call's error (lower-cased) says a `cd` found no such folder: zsh's ``(eval):cd:1: no such
    file or directory: app``, bash's ``cd: app: No such file or directory``, sh's ``cd: can't cd to app`` (the shell
    keeps its folder between calls: an earlier `cd` moved it)."""
    for line in lowered_error.splitlines()[:SCANNED_LINES]:
        if ("no such file or directory" in line or "can't cd" in line) and ("cd:" in line or line.startswith("cd ")):
            return True
    return False


def refused_cd(lowered_error: str) -> bool:
    """Whether a failed call's error (lower-cased) is the agent's harness refusing a `cd` out of its folder."""
    start = lowered_error.find("cd to '")
    return start >= 0 and "' was blocked" in lowered_error[start:start + 600]


def _names_missing(error: str, word: str) -> bool:
    """The error says `word` itself is missing: ``command not found: word``, ``word: command not found``,
    ``no module named word``, ``word: not found``."""
    return any(form in error for form in (f"not found: {word}", f"{word}: command not found", f"{word}: not found",
                                          f"no module named {word}", f"no such command: {word}"))


# How the common commit hook runners say they stopped a commit (pre-commit, husky, lint-staged, lefthook).
_HOOK_REFUSALS = ("- hook id: ", "husky - ", "running tasks for staged files", "lint-staged", "lefthook")


def commit_hook_refused(lowered_error: str) -> bool:
    """Whether a failed call's error (lower-cased) is a commit hook's refusal, in its runner's own words."""
    return any(marker in lowered_error for marker in _HOOK_REFUSALS)


def call_key(tool_name: object, command: str | None, error: str = "") -> str | None:
    """``cmd:…`` of the command a failed shell call ran (the one its error names, else the last of a chain),
    ``tool:<name>`` for any other tool; None when there is nothing to key it by."""
    if not isinstance(tool_name, str) or not tool_name:
        return None
    if tool_name != "Bash":
        return "tool:" + tool_name
    keys = [k for k in command_keys(command or "") if k.startswith("cmd:")]
    if not keys:
        return None
    lowered = error[:4000].lower()
    if "cmd:git commit" in keys and commit_hook_refused(lowered):
        return "cmd:git commit"  # lint-staged says "git stash" on its way: the `git add` before it did not fail
    for key in keys:
        program = program_of(key)
        if len(program) >= 2 and program in lowered:
            return key
    return keys[-1]
