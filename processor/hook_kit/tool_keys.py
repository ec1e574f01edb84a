"""What a tool call works on, as the keys an earlier session's lessons are filed under, for every agent.

The PreToolUse hook derives them from the call about to run, the processor from the calls a lesson came
from (``processor/recall/lesson_index.py``), with this one function, so both sides always agree:

- ``file:<path>``: a file the call reads or changes (Read/Edit/Write/MultiEdit/NotebookEdit, a Grep or Glob
  confined to one file, a path a shell command names), relative to the project root when inside it;
- ``cmd:<program subcommand…>``: a shell command's program with its subcommand words, one key per command
  of a pipeline or ``&&`` chain: ``uv run pytest``, ``git commit``, ``npm run build``, ``python -m pytest``.
  Commands that only look around (``ls``, ``cat``, ``grep``, ``cd``…) get none: a lesson is never about them.

Tools go by Claude Code's names: capture stores every agent's calls under them, and the hooks name an event's
tool the same way (``hook_io.call_of``: Gemini's ``run_shell_command`` is ``Bash``…). A patch run through
the shell (``apply_patch <<'EOF' … *** Update File: src/x.py``) works on the files it names.

Stdlib only and no ``re`` (the hook's start-up is its cost): plain string operations.
"""

# Programs that only read or navigate: no lesson is ever filed under them.
GENERIC = frozenset(
    "cd ls ll cat bat head tail less more echo printf grep egrep rg ag find fd sed awk wc sort uniq cut tr xargs "
    "pwd which whereis type file stat true false sleep tee diff mkdir touch rm cp mv chmod chown ln env export "
    "set unset source . test [ open xdg-open date whoami clear history command jq yq tree du df ps kill pkill "
    "realpath dirname basename read exit".split())
# Commands that move or set up the shell for the next one: their paths are where, not what.
_SETUP = frozenset("cd pushd popd source . export set unset which type command".split())
# Runners whose next words name the tool that really runs (`uv run pytest`, `npx tsc`): the key keeps the
# runner and the tool with its own subcommand (`uv run ty check`). Value: the runner's own subcommand, if any.
RUNNERS = {"uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run", "rye": "run",
           "npx": "", "pnpx": "", "bunx": "", "pnpm": "exec", "yarn": "exec", "bundle": "exec"}
# Prefixes that run the next word: skipped.
WRAPPERS = frozenset("sudo time exec nohup nice command builtin".split())
MAX_COMMAND_WORDS = 3
# Where a package manager, git or make runs, given before its subcommand (``pnpm --filter api test``, ``git -C
# repo status``): skipped with its value, so the key is the subcommand's (``cmd:pnpm test``), not the bare program's.
_SCOPED = frozenset("git pnpm npm yarn bun make turbo".split())
SCOPE_OPTIONS = frozenset("--filter -F --prefix -C --dir --cwd --workspace".split())
MAX_KEYS = 8
_FILE_TOOLS = ("Read", "Edit", "Write", "MultiEdit", "NotebookEdit", "NotebookRead")
_PATH_KEYS = ("file_path", "notebook_path", "path", "absolute_path", "dir_path")
_PATCH_MARKS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ")


def _word_like(word: str) -> bool:
    """A subcommand, not an option, path, value or quoted text: letters, digits, - _ : only."""
    if not word or word[0] in "-'\"$" or not word[0].isalpha():
        return False
    return all(c.isalnum() or c in "-_:" for c in word)


def _program_like(word: str) -> bool:
    """A program's name: a word, or a script's file name (``start.sh``, ``manage.py``, run as ``./start.sh``)."""
    return _word_like(word) or (_word_like(word.replace(".", "_")) and 0 < word.find(".") < len(word) - 1)


def path_like(word: str) -> bool:
    word = word.strip("'\"")
    if not word or word[0] == "-" or "://" in word or "=" in word or "$" in word or "*" in word:
        return False
    if "/" in word:
        return len(word) > 1
    dot = word.rfind(".")
    return 0 < dot < len(word) - 1 and word[dot + 1:].isalnum() and not word[:dot].isdigit()


def relative(path: str, root: str | None) -> str:
    """The path relative to the project root when inside it, without a leading ./"""
    path = path.strip().strip("'\"")
    while path.startswith("./"):
        path = path[2:]
    if root and path.startswith("/"):
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix):]
        if path.rstrip("/") + "/" == prefix:
            return "."  # the project's own folder: a search of all of it is about no file, folder or name in it
    return path


def _split_commands(command: str) -> list[str]:
    """The simple commands of a command line, split at && || ; | and newlines outside quotes; a heredoc's
    body and anything after it are not commands (the body is text fed to one)."""
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    i = 0
    while i < len(command):
        char = command[i]
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                current.append(char)
                i += 1
                char = command[i] if i < len(command) else ""
            current.append(char)
        elif char in "'\"":
            quote = char
            current.append(char)
        elif command.startswith("<<", i):
            break
        elif char in ";|\n&":
            if char == "&" and not command.startswith("&&", i):
                current.append(char)  # a redirection (2>&1) or a background job
            else:
                parts.append("".join(current))
                current = []
                if command.startswith(("&&", "||"), i):
                    i += 1
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _program(word: str) -> str:
    """The program a command word runs: its file name, python3 and py read as python."""
    program = word.rsplit("/", 1)[-1]
    return "python" if program in ("python3", "py") else program


def simple_commands(command: str) -> list[str]:
    """The simple commands of a command line (``_split_commands``), read up to 2,000 characters as keys are."""
    return _split_commands(command[:2000])


def command_key(segment: str) -> str | None:
    """``cmd:…`` for one simple command, or None for a look-around command or nothing recognisable."""
    words = segment.split()
    while words and ("=" in words[0] and not words[0].startswith("=") or words[0] in WRAPPERS):
        words = words[1:]  # FOO=bar cmd, sudo cmd
    if not words:
        return None
    program, rest = _program(words[0]), words[1:]
    if not _program_like(program) or program in GENERIC:
        return None
    if program in _SCOPED:
        while rest and (rest[0] in SCOPE_OPTIONS or rest[0].partition("=")[0] in SCOPE_OPTIONS and "=" in rest[0]):
            rest = rest[2:] if rest[0] in SCOPE_OPTIONS else rest[1:]
    runner: list[str] = []
    subcommand = RUNNERS.get(program)
    if subcommand is not None and (not subcommand or rest[:1] == [subcommand]):
        # uv run ty check: the tool is what `uv run` runs (`uv sync` is uv's own subcommand)
        runner = [program, subcommand] if subcommand else [program]
        rest = rest[1:] if subcommand else rest
        if not rest:
            return None
        program, rest = _program(rest[0]), rest[1:]
        if not _word_like(program) or program in GENERIC:
            return None
    if program == "python" and len(rest) >= 2 and rest[0] == "-m" and _word_like(rest[1]):
        return "cmd:" + " ".join([*runner, "python", "-m", rest[1]])
    key = [program]
    for word in rest:
        if len(key) >= MAX_COMMAND_WORDS or not _word_like(word):
            break
        key.append(word)
    return "cmd:" + " ".join(runner + key)


def patch_keys(patch: str, root: str | None = None) -> list[str]:
    """The files an apply_patch names (``*** Update File: src/x.py``), as ``file:`` keys."""
    keys: list[str] = []
    for line in patch.splitlines():
        for mark in _PATCH_MARKS:
            if line.startswith(mark) and line[len(mark):].strip():
                key = "file:" + relative(line[len(mark):], root)
                if key not in keys:
                    keys.append(key)
    return keys[:MAX_KEYS]


def command_keys(command: str, root: str | None = None) -> list[str]:
    """The keys of a shell command line: each command's ``cmd:`` key and the files its words name. Where a chain
    goes (``cd``, ``pushd``) and what it sets up (``source .venv/bin/activate``, ``export``) name no file it
    works on: nearly every command of a project starts that way, and a key they all shared would tie every
    lesson to every command."""
    if command.lstrip().startswith("apply_patch") and "*** Begin Patch" in command:
        return patch_keys(command, root)
    return _segment_keys(_split_commands(command[:2000]), root)


def _segment_keys(segments: list[str], root: str | None) -> list[str]:
    """Each segment's command key, and the files its words name while there is room: a `git add` of eight files
    leaves the `git commit` after it its key."""
    keys: list[str] = []
    files = 0
    for segment in segments:
        key = command_key(segment)
        if key and key not in keys:
            keys.append(key)
        words = segment.split()
        if words and words[0] in _SETUP:
            continue
        for word in words[1:]:
            if path_like(word) and len(keys) < MAX_KEYS:
                path = relative(word, root)
                file_key = "file:" + path
                if path and path.rstrip("/") != (root or "").rstrip("/") and file_key not in keys:
                    keys.append(file_key)
                    files += 1
    while len(keys) > MAX_KEYS and files:  # over by the commands after the room ran out: the last files go
        last_file = max(i for i, k in enumerate(keys) if k.startswith("file:"))
        del keys[last_file]
        files -= 1
    return keys


def name_key(word: str) -> str | None:
    """``name:<name>`` of an identifier or a file's stem, spelled one way: ``ConnCase``, ``conn_case.ex`` and
    ``conn-case`` are all ``name:conncase`` (a fact about a name meets the file that holds it, and a search for
    it); None for a name too short to mean one thing."""
    stem = word.rsplit("/", 1)[-1]
    dot = stem.find(".")
    if dot > 0:
        stem = stem[:dot]
    letters = "".join(c for c in stem.lower() if c.isalnum())
    return "name:" + letters if len(letters) >= 4 and not letters.isdigit() else None


def dir_key(path: str) -> str | None:
    """``dir:<folder>/`` of a (relative) path: the folder it is in, or itself when it names a folder."""
    folder = path.rstrip("/") if path.endswith("/") else path.rpartition("/")[0]
    return f"dir:{folder}/" if folder and folder not in (".", "..") else None


def kind_key(path: str) -> str | None:
    """``kind:<name, its numbers masked>`` of a file named by a number (``12.2-CONTEXT.md`` → ``kind:#-context.md``,
    ``0007_add_index.py`` → ``kind:#_add_index.py``): the next file of that kind (``12.3-CONTEXT.md``) is written
    from the same template and meets what the last one met; None for a name without a number or without words."""
    name = path.rstrip("/").rpartition("/")[2].lower()
    if not any(c.isdigit() for c in name) or sum(c.isalpha() for c in name) < 4:
        return None
    masked: list[str] = []
    for index, char in enumerate(name):
        between = char == "." and index and name[index - 1].isdigit() and name[index + 1:index + 2].isdigit()
        if char.isdigit() or between:
            if not masked or masked[-1] != "#":
                masked.append("#")
        else:
            masked.append(char)
    return "kind:" + "".join(masked)


def stages_everything(segment: str) -> str | None:
    """``cmd:git add -A`` for staging everything (``git add -A``, ``--all``, ``.``, ``git commit -a``): a lesson
    about what that swept in is told then, not before every ``git add`` of one file."""
    words = segment.split()
    if words[:2] == ["git", "add"] and any(w in ("-A", "--all", ".", "-u") for w in words[2:]):
        return "cmd:git add -A"
    if words[:2] == ["git", "commit"] and any(w.startswith("-") and not w.startswith("--") and "a" in w
                                              for w in words[2:]):
        return "cmd:git commit -a"
    return None


# What makes a commit or push skip the repository's hooks: git's own option, and the hook runners' switches
# (pre-commit's SKIP=<ids>, husky's HUSKY=0, lefthook's LEFTHOOK=0), set before the command.
HOOKED_KEYS = ("cmd:git commit", "cmd:git push")
_BYPASS_OPTIONS = ("--no-verify",)
_BYPASS_SWITCHES = ("SKIP=", "HUSKY=0", "HUSKY_SKIP_HOOKS=", "LEFTHOOK=0")


def hook_bypass(command: str) -> str | None:
    """How a command line skips the repository's commit hooks, as typed (``--no-verify``, ``SKIP=ruff``), or None."""
    for segment in simple_commands(command):
        key = command_key(segment)
        words = segment.split()
        if key not in HOOKED_KEYS:
            hooks_path = next((w for w in words if w.lower().startswith("core.hookspath=")), None)
            if key == "cmd:git" and hooks_path:
                return hooks_path
            continue
        for word in words:
            if "=" not in word:
                break  # past the assignments before the command
            if word.startswith(_BYPASS_SWITCHES):
                return word
        for word in words[2:]:
            if word in _BYPASS_OPTIONS or (key == "cmd:git commit" and word == "-n"):
                return word
    return None


def assigned(segment: str) -> tuple[list[str], str]:
    """The variables a simple command sets for its program (``DB_HOST=db PORT=3000 pnpm dev`` → ``DB_HOST``,
    ``PORT``) and the command without them, its redirections or what a `&` runs after it (``pnpm dev``)."""
    words = segment.split()
    names: list[str] = []
    while words and "=" in words[0] and words[0].partition("=")[0].replace("_", "a").isalnum():
        name, _, value = words.pop(0).partition("=")
        names.append(name)
        quote = value[:1]
        if quote in ("'", '"') and (len(value) < 2 or not value.endswith(quote)):  # a value with spaces
            while words and not words.pop(0).endswith(quote):
                pass
    core: list[str] = []
    for word in words:
        if word in ("&", "&&", "|", ";") or word.startswith((">", "2>", "1>", "&>", "<")):
            break
        core.append(word)
    return names, " ".join(core)


def prog_key(key: str) -> str | None:
    """``prog:<program>`` of a ``cmd:`` key, past its runner (``cmd:uv run pytest -q`` → ``prog:pytest``): what a
    decision about a tool ("use pnpm instead of npm") is filed under."""
    words = key[4:].split()
    if "-m" in words[:-1]:
        words = words[words.index("-m") + 1:]
    words = [w for w in words if w not in RUNNERS and w not in ("run", "exec")]
    return "prog:" + words[0] if words else None


def _around(keys: list[str]) -> list[str]:
    """The call's keys, then the program of each command and the folder and name of each file it touches:
    facts and decisions are filed under those."""
    more = []
    for key in keys:
        around = (prog_key(key),) if key.startswith("cmd:") else (dir_key(key[5:]), name_key(key[5:])) \
            if key.startswith("file:") else ()
        more += [k for k in around if k and k not in keys and k not in more]
    return keys + more


def fact_keys(thing: str, root: str | None = None) -> list[str]:
    """Where a fact about `thing` is filed: a path's file key and folder, a folder's key, or an identifier's name."""
    thing = thing.strip().strip("`'\"")
    if "/" in thing or path_like(thing):
        path = relative(thing, root)
        if path.endswith("/"):
            return [k for k in (dir_key(path),) if k]
        return [k for k in ("file:" + path, dir_key(path)) if k]
    key = name_key(thing) if _word_like(thing.replace(".", "_")) else None
    return [key] if key else []


def tool_keys(tool_name: object, tool_input: object, root: str | None = None) -> list[str]:
    """The keys of one tool call (its tool under Claude Code's name, as ``hook_io.call_of`` and capture give
    it, and its input): what it runs and the files it touches, with their folders and names; a search for a plain
    identifier is a look for that name."""
    if not isinstance(tool_name, str) or not isinstance(tool_input, dict):
        return []
    if tool_name == "apply_patch":
        patch = tool_input.get("input", tool_input.get("command"))
        return _around(patch_keys(patch, root)) if isinstance(patch, str) else []
    if tool_name == "Bash":
        command = tool_input.get("command", tool_input.get("cmd"))
        if not isinstance(command, str):
            return []
        if command.lstrip().startswith("apply_patch") and "*** Begin Patch" in command:
            return _around(patch_keys(command, root))
        segments = _split_commands(command[:2000])  # once: the hook runs before every call
        broad = [k for k in map(stages_everything, segments) if k]
        return _around(_segment_keys(segments, root)) + list(dict.fromkeys(broad))
    keys: list[str] = []
    if tool_name in _FILE_TOOLS or tool_name in ("Grep", "Glob"):
        for name in _PATH_KEYS:
            value = tool_input.get(name)
            if isinstance(value, str) and value.strip() and (tool_name in _FILE_TOOLS or path_like(value)):
                if tool_name in ("Grep", "Glob") and "/" not in value and "." not in value:
                    break
                path = relative(value, root)
                keys = ["file:" + path] if path not in (".", "") else []
                kind = kind_key(path) if keys and tool_name in _FILE_TOOLS else None
                if kind:  # after its folder and name (``_around``): the file's own keys come first
                    return _around(keys) + [kind]
                break
    if tool_name == "Grep":
        pattern = tool_input.get("pattern")
        if isinstance(pattern, str) and _word_like(pattern.strip()):
            key = name_key(pattern.strip())
            if key:
                keys.append(key)
    return _around(keys)


# --- the programs a shell command runs bare: outside the environment set-up a project runs its tools in ---------
# BookMinder's sessions ran `pytest`, `pip` and `pre-commit` after ``source .venv/bin/activate``, in the same
# command, every time: each shell call starts afresh, so a bare ``pytest specs/`` fails "command not found" and the
# next call is the same one after the activation. That environment is a memory of the project
# (``processor/memory/environments.py``), told right after one of its programs is not found; told before a call
# that runs one bare, the failure does not happen. A step runs a program bare when no set-up came before it in the
# command (an ``activate`` script, ``conda activate``, ``nvm use``, an ``export PATH=``), not through a runner
# (``uv run pytest``, ``npx``), not by a path (``.venv/bin/pytest``), and not after a ``cd`` out of the project's
# folder (a sibling checkout has its own environment). An interpreter run bare (``python3 script.py``) is not one:
# the system's may run it; its ``-m`` module is (``python3 -m pytest``: pytest). Nor is ``pip install --user``: it
# installs into the user's own site on purpose, which a virtualenv refuses (BookMinder's, for a global pre-commit).

_BARE_WRAPPERS = WRAPPERS | {"env"}
_BARE_RUNNERS = frozenset({*RUNNERS, "uvx", "conda", "pipx", "nix", "direnv", "mise", "asdf"})
_BARE_INTERPRETERS = frozenset({"python", "python3"})
_PIPS = frozenset({"pip", "pip3"})
# The set-ups ``processor/memory/environments.py`` learns an environment from (its ``_ACTIVATION``), read without
# ``re``, and the shells' others that make a program found.
_BARE_SET_UPS = ("conda activate", "mamba activate", "micromamba activate", "nvm use", "export PATH=", "pyenv shell",
                 "workon ", "eval ")


def _sets_up_environment(step: str) -> bool:
    """Whether a step sets up an environment for the steps after it."""
    words = step.split()
    if len(words) >= 2 and words[0] in ("source", ".") and words[1].endswith("/activate"):
        return True
    return step.startswith(_BARE_SET_UPS)


def _leaves_project(step: str, root: str | None) -> bool:
    """Whether a step is a ``cd`` out of the project's folder (an absolute path elsewhere)."""
    words = step.split()
    if len(words) != 2 or words[0] != "cd" or not root:
        return False
    target = words[1].strip("'\"").rstrip("/")
    return target.startswith("/") and target != root.rstrip("/") and not target.startswith(root.rstrip("/") + "/")


def leaves_project(command: str, root: str | None) -> str | None:
    """The folder outside the project's a command goes to (a ``cd`` to an absolute path outside `root`) before it
    runs anything, or None: what failed there may need that folder's own set-up (BookMinder's sessions ran `cd
    …/BookMind && python -m pytest` in a sibling checkout)."""
    for step in simple_commands(command):
        if _leaves_project(step, root):
            return step.split()[1].strip("'\"").rstrip("/")
        if step.split()[:1] != ["cd"]:
            return None
    return None


def ran_below(command: str, cwd: object) -> tuple[str, str] | None:
    """(the folder below, the folder above it) when `command`, before any ``cd`` of its own, names a path that
    starts with the last folders of where it ran (`cwd`): ``git add apps/web/src/FileBrowser.tsx`` run in
    ``…/cipher-box/apps/web``, where an earlier ``cd apps/web && npx vite build`` left Claude Code's shell
    (cipher-box 02-13: "could not open directory 'apps/web/apps/web/src/…'"), gives (``apps/web``,
    ``…/cipher-box``) — read from the paths alone, so in a worktree or a clone alike; else None."""
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        return None
    parts = [p for p in cwd.split("/") if p]
    for step in simple_commands(command):
        words = step.split()
        if words[:1] == ["cd"]:
            return None  # from here on, paths are from the folder it went to
        for word in words[1:]:
            path = word.strip("'\"")
            if path.startswith(("/", "-", "~", ".")) or "/" not in path:
                continue
            leading = path.split("/")
            for depth in range(min(len(parts) - 1, len(leading) - 1), 0, -1):  # the longest that fits
                if parts[-depth:] == leading[:depth]:
                    return "/".join(parts[-depth:]), "/" + "/".join(parts[:-depth])
    return None


def bare_programs(command: str, root: str | None) -> list[str]:
    """The programs `command` runs bare, in order, each once."""
    found: list[str] = []
    for step in simple_commands(command):
        if _sets_up_environment(step) or _leaves_project(step, root):
            break  # every later step runs inside that set-up, or in another project's folder
        words = step.replace("(", " ").replace(")", " ").split()
        while words and (words[0] in _BARE_WRAPPERS or ("=" in words[0] and not words[0].startswith(("-", "=")))):
            words = words[1:]
        if not words or "/" in words[0] or words[0] in _BARE_RUNNERS or not words[0][:1].isalpha():
            continue
        program = words[0]
        if program in _BARE_INTERPRETERS:
            module = words[words.index("-m") + 1] if "-m" in words[:-1] else None
            program = module.partition(".")[0] if module else None
        if program in _PIPS and "--user" in words:
            continue  # an install into the user's own site, on purpose: outside any environment (a venv refuses it)
        if program and program not in found:
            found.append(program)
    return found


def kills(command: str) -> bool:
    """Whether a shell command stops processes (``kill $(lsof -ti:3000)``, ``lsof -ti :3000 | xargs kill -9``)."""
    for segment in simple_commands(command):
        words = segment.split()
        while words and (words[0] in ("xargs", "sudo") or words[0].startswith("-")):  # `xargs -r kill`
            words = words[1:]
        if words and words[0].rpartition("/")[2] in ("kill", "pkill", "killall"):
            return True
    return False
