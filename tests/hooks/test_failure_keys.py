"""A failed call's signature and keys (processor/hook_kit/failure_keys.py), on errors as agents print them: what
stays of an error (its words) and what is masked (paths, numbers, ids, file names), when two failures are the same,
what a failure is filed under, and what is not a failure at all. Each case a row."""

from __future__ import annotations

import pytest

from processor.hook_kit.failure_keys import (
    another_go,
    call_key,
    call_signature,
    failure_key,
    not_a_failure,
    same_failure,
    signature,
)


def no_upstream(branch: str) -> str:
    return (f"Exit code 128\nfatal: The current branch {branch} has no upstream branch.\nTo push the current branch "
            f"and set the remote as upstream, use\n\n    git push --set-upstream origin {branch}\n")


def pytest_failed(test: str, left: int, right: int) -> str:
    return (f"Exit code 1\n================ FAILURES ================\n________ {test} ________\n\n"
            f"    def {test}():\n>       assert total([1, 2]) == {right}\nE       assert {left} == {right}\n\n"
            f"tests/test_cart.py:12: AssertionError\n========= short test summary info =========\n"
            f"FAILED tests/test_cart.py::{test} - assert {left} == {right}\n"
            f"========= 1 failed, 3 passed in 0.12s =========")


NPM_ENOENT = ("npm ERR! code ENOENT\nnpm ERR! syscall open\nnpm ERR! path /home/u/shop/package.json\n"
              "npm ERR! errno -2\n"
              "npm ERR! enoent ENOENT: no such file or directory, open '/home/u/shop/package.json'\n"
              "npm ERR! enoent This is related to npm not being able to find a file.")
TRACEBACK = ('Traceback (most recent call last):\n  File "/home/u/shop/app.py", line 3, in <module>\n'
             "    import requests\nModuleNotFoundError: No module named 'requests'")
KEY_ERROR = ('Exit code 1\nloading settings\nTraceback (most recent call last):\n  File "/srv/app/main.py", line 9, in '
             '<module>\n    port = config["port"]\n           ~~~~~~^^^^^^^^\n'
             '  File "/srv/app/config.py", line 4, in load\n    raise ValueError("invalid config")\nKeyError: \'port\'')
CHAINED = ('Traceback (most recent call last):\n  File "a.py", line 2, in <module>\n    open("x.toml")\n'
           "FileNotFoundError: [Errno 2] No such file or directory: 'x.toml'\n\nDuring handling of the above "
           'exception, another exception occurred:\n\nTraceback (most recent call last):\n  File "a.py", line 4, in '
           "<module>\n    raise SystemExit(1)\nRuntimeError: config cannot be loaded")
DENIED = "Exit code 126\n/bin/bash: line 1: ./deploy.sh: Permission denied"
PRE_COMMIT = ("Exit code 1\ntrim trailing whitespace.................................................Passed\n"
              "fix end of files.........................................................Failed\n"
              "- hook id: end-of-file-fixer\n- exit code: 1\n- files were modified by this hook\n\n"
              "Fixing src/cart.py\n\n"
              "check yaml...............................................................Passed")
GERMAN = "Fehler: Die Datei /srv/app/config.yml konnte nicht gelesen werden, Zugriff verweigert"


@pytest.mark.parametrize(("error", "lines"), [
    pytest.param(no_upstream("fix-login"), ["fatal the current branch fix-login has no upstream branch"],
                 id="git push without an upstream: the error line, not the advice after it"),
    pytest.param(no_upstream("feature/cart"), ["fatal the current branch <path> has no upstream branch"],
                 id="a branch name with a slash is masked like a path"),
    pytest.param(pytest_failed("test_total", 3, 4), ["failed <path> assert <n>", "<n> failed <n> passed in <id>"],
                 id="pytest: the FAILED line and the count, the test's path and numbers masked"),
    pytest.param(NPM_ENOENT, ["npm err enoent enoent no such file or directory open <path>"],
                 id="npm: the line that says what is missing"),
    pytest.param(TRACEBACK, ["modulenotfounderror no module named requests"],
                 id="a Python traceback: its last line, not the frames"),
    pytest.param(KEY_ERROR, ["keyerror port"],
                 id="a traceback: its exception line first, even of two words; the frames' source never"),
    pytest.param(CHAINED, ["runtimeerror config cannot be loaded",
                           "filenotfounderror errno <n> no such file or directory <file>"],
                 id="chained tracebacks: the last exception first, then the one it was handling"),
    pytest.param(DENIED, ["<path> line <n> <path> permission denied"], id="permission denied"),
    pytest.param(PRE_COMMIT, ["fix end of files failed", "files were modified by this hook"],
                 id="a pre-commit hook: the failed hook's status line and what it did, not the passed ones"),
    pytest.param("Exit code 2\nsrc/cart.ts(12,5): error TS2304: Cannot find name 'Order'.",
                 ["<path> error <id> cannot find name order"], id="tsc: the position and the code masked"),
    pytest.param("fatal: bad object 3f2a9c1e7b\nerror: could not lock config file .git/config at 2026-11-27T10:00:01Z",
                 ["fatal bad object <id>", "error could not lock config file <path> at <id>"],
                 id="hashes and timestamps masked"),
    pytest.param("Error: Exit code 1\nerror: externally-managed-environment", ["error externally-managed-environment"],
                 id="Claude Code's Error: wrapper dropped; an error's long name says what"),
    pytest.param(GERMAN, ["fehler die datei <path> konnte nicht gelesen werden zugriff verweigert"],
                 id="another language: the first line, when it says much"),
    pytest.param("Exit code 1\n" + GERMAN, ["fehler die datei <path> konnte nicht gelesen werden zugriff verweigert"],
                 id="another language after Claude Code's exit code line"),
    pytest.param("Exit code 1\nE2E Tests\tfail\t2m13s\thttps://github.com/FSM1/cipher-box/actions/runs/22074454038\t\n"
                 "Test\tfail\t54s\thttps://github.com/FSM1/cipher-box/actions/runs/22074454049\t", [],
                 id="a status query's table (gh pr checks): the state it reports, not the call's failure"),
    pytest.param("Exit code 1", [], id="an exit code alone says nothing"),
    pytest.param("Exit code 1\nerror\nfailed", [], id="bare words say nothing"),
    pytest.param("", [], id="nothing"),
])
def test_the_signature_of_an_error(error: str, lines: list[str]) -> None:
    assert signature(error) == lines


def test_a_signature_has_at_most_three_lines() -> None:
    error = ("Exit code 1\nerror: cannot open alpha because the file is missing\n"
             "fatal: gave up on beta after two tries\nerror: permission denied for gamma\nerror: invalid delta")
    assert signature(error) == ["error cannot open alpha because the file is missing",
                                "fatal gave up on beta after two tries", "error permission denied for gamma"]


@pytest.mark.parametrize(("a", "b", "same"), [
    pytest.param(no_upstream("fix-login"), no_upstream("feature/cart"), True,
                 id="git push on another branch: a long line that differs in one word"),
    pytest.param(pytest_failed("test_total", 3, 4), pytest_failed("test_tax", 7, 9), True,
                 id="pytest: another test, other numbers"),
    pytest.param(GERMAN, GERMAN.replace("config.yml", "secrets.yml"), True, id="another language, another file"),
    pytest.param("Exit code 2\nsrc/cart.ts(12,5): error TS2304: Cannot find name 'Order'.",
                 "Exit code 2\nsrc/api.ts(40,1): error TS2304: Cannot find name 'Invoice'.", True,
                 id="tsc: another name missing in another file"),
    pytest.param(no_upstream("fix-login"), NPM_ENOENT, False, id="git push and npm"),
    pytest.param(TRACEBACK, TRACEBACK.replace("requests", "numpy"), True,
                 id="another module missing: a line of five words that differs in one"),
    pytest.param("Error: No such option: --frozen", "Error: No such option: --locked", False,
                 id="a shorter line that differs in one word: another failure"),
    pytest.param(DENIED, PRE_COMMIT, False, id="permission denied and a pre-commit hook"),
    pytest.param("Exit code 1", "Exit code 1", False, id="no signature is never the same failure"),
    pytest.param("Exit code 127\n(eval):1: command not found: psql", "bash: line 1: psql: command not found", True,
                 id="the same program not found, said by zsh and by bash"),
    pytest.param("/bin/sh: 1: psql: not found", 'ERR_PNPM_RECURSIVE_EXEC_FIRST_FAIL Command "psql" not found', True,
                 id="sh and pnpm"),
    pytest.param("zsh:1: command not found: psql", "bash: line 1: docker: command not found", False,
                 id="another program not found"),
])
def test_when_two_failures_are_the_same(a: str, b: str, same: bool) -> None:
    assert same_failure(signature(a), signature(b)) is same
    assert same_failure(signature(b), signature(a)) is same


@pytest.mark.parametrize(("command", "error", "lines"), [
    pytest.param("PGPASSWORD=x psql -h db -c 'SELECT 1' 2>/dev/null", "Exit code 127", ["command not found psql"],
                 id="a 127 whose message went to /dev/null: its program not found"),
    pytest.param("cd apps/api && tsx seed.ts > /tmp/out 2>&1", "exit status 127", ["command not found tsx"],
                 id="another agent's words for it; of a chain, the last program"),
    pytest.param("make db", "Exit code 127\nmake: *** [db] Error 127", ["make db error <n>"],
                 id="a 127 that said what it was: its own words"),
    pytest.param("pytest -x", "Exit code 1", [], id="another status that says nothing: no signature"),
])
def test_the_signature_of_a_failed_shell_call(command: str, error: str, lines: list[str]) -> None:
    assert call_signature("Bash", command, error) == lines
    assert call_signature("Read", command, error) == signature(error)


@pytest.mark.parametrize(("tool", "command", "error", "key"), [
    pytest.param("Bash", "pytest -q tests/test_cart.py", pytest_failed("test_total", 3, 4), "cmd:pytest",
                 id="the program, not its arguments"),
    pytest.param("Bash", "git push", no_upstream("fix-login"), "cmd:git push", id="the program and its subcommand"),
    pytest.param("Bash", "cd src && uv run pytest -x", "", "cmd:uv run pytest",
                 id="a runner kept, a cd before it not a command"),
    pytest.param("Bash", "npm ci && git push", NPM_ENOENT, "cmd:npm ci", id="of a chain, the one the error names"),
    pytest.param("Bash", "git add . && git commit -m 'wip'", PRE_COMMIT, "cmd:git commit",
                 id="of a chain, the last when the error names none"),
    pytest.param("Bash", "source .venv/bin/activate && pytest tests/test_api.py",
                 "(eval):1: command not found: pytest", "cmd:pytest", id="the command not found"),
    pytest.param("Bash", "ls -la && cat README.md", "cat: README.md: No such file or directory", None,
                 id="commands that only look around: nothing to key by"),
    pytest.param("Bash", "", "", None, id="no command"),
    pytest.param("Bash", None, "", None, id="no command given"),
    pytest.param("Read", None, "File content (312KB) exceeds maximum allowed size (256KB)", "tool:Read",
                 id="another tool: its name"),
    pytest.param("mcp__github__create_pr", None, "Validation failed", "tool:mcp__github__create_pr",
                 id="an MCP tool: its name"),
    pytest.param(None, "ls", "", None, id="no tool"),
    pytest.param("", "ls", "", None, id="an empty tool name"),
])
def test_the_call_key_of_a_failed_call(tool: object, command: str | None, error: str, key: str | None) -> None:
    assert call_key(tool, command, error) == key


@pytest.mark.parametrize(("key", "error", "filed_under"), [
    pytest.param("cmd:git push", no_upstream("fix-login"), "fail:git", id="by program: git push"),
    pytest.param("cmd:git commit", PRE_COMMIT, "fail:git", id="by program: git commit"),
    pytest.param("cmd:pytest tests", pytest_failed("test_total", 3, 4), "fail:pytest",
                 id="a word of the arguments caught in the key"),
    pytest.param("cmd:uv run pytest", "", "fail:pytest", id="past the runner"),
    pytest.param("cmd:python -m pytest", "(eval):1: command not found: python", "fail:python",
                 id="the word the error says is missing"),
    pytest.param("cmd:npx tsc", "sh: 1: npx: not found", "fail:npx", id="the runner that is missing"),
    pytest.param("cmd:python -m pytest", "/bin/sh: 1: pytest: not found", "fail:pytest",
                 id="the program itself missing"),
    pytest.param("tool:Read", "File content (312KB) exceeds maximum allowed size (256KB)", "fail:tool:Read",
                 id="another tool"),
    pytest.param("cmd:uv venv", "Error: ERROR: cd to '/tmp' was blocked. For security, Claude Code may only change "
                 "directories to child directories of the original working directory", "fail:cd",
                 id="a cd the harness refused, whatever ran after it"),
    pytest.param("cmd:pytest", "ERROR: cd to '~/x' failed", "fail:pytest", id="a cd that failed is not refused"),
    pytest.param("cmd:git commit", "Error: `pre-commit` not found.  Did you forget to activate your virtualenv?",
                 "fail:pre-commit", id="a program the commit's hook ran, not found (BookMinder, as recorded)"),
    pytest.param("cmd:build.sh", "Exit code 127\n./build.sh: line 3: jq: command not found", "fail:jq",
                 id="a program a script ran, not found"),
    pytest.param("cmd:gh api", "gh: Not Found (HTTP 404)", "fail:gh", id="an HTTP not found is the program's own"),
])
def test_where_a_failure_is_filed(key: str, error: str, filed_under: str) -> None:
    assert failure_key(key, error) == filed_under


@pytest.mark.parametrize(("key", "other", "again"), [
    pytest.param("cmd:git push", "cmd:git push --set-upstream", True, id="the same program and subcommand"),
    pytest.param("cmd:git add", "cmd:git commit", False, id="another subcommand"),
    pytest.param("cmd:pytest", "cmd:pytest specs", True, id="one names no subcommand"),
    pytest.param("cmd:uv run pytest", "cmd:python -m pytest", True, id="the same program through two runners"),
    pytest.param("cmd:uv run pytest", "cmd:pytest", True, id="with and without a runner"),
    pytest.param("cmd:uv sync", "cmd:uv venv", False, id="a runner's own subcommands"),
    pytest.param("cmd:make", "cmd:cmake", False, id="another program"),
    pytest.param("tool:Read", "tool:Read", True, id="the same tool"),
    pytest.param("tool:Read", "cmd:cat", False, id="a tool and a command"),
])
def test_what_is_another_go_at_a_call(key: str, other: str, again: bool) -> None:
    assert another_go(key, other) is again


@pytest.mark.parametrize(("tool", "error", "not_failure"), [
    pytest.param("Bash", "The user doesn't want to proceed with this tool use. The tool use was rejected", True,
                 id="declined"),
    pytest.param("Bash", "[Request interrupted by user for tool use]", True, id="interrupted"),
    pytest.param("mcp__github__create_pr", "Permission to use mcp__github__create_pr has been denied", True,
                 id="not granted"),
    pytest.param("Edit", "String to replace not found in file.", True, id="an edit whose text was not found"),
    pytest.param("Write", "File has not been read yet. Read it first before writing to it.", True,
                 id="a file not read first"),
    pytest.param("TodoWrite", "Invalid input", True, id="the agent's planning"),
    pytest.param(None, "Exit code 1", True, id="no tool"),
    pytest.param("Bash", no_upstream("fix-login"), False, id="git push failed"),
    pytest.param("Bash", DENIED, False, id="permission denied by the system, not the user"),
    pytest.param("Read", "File content (312KB) exceeds maximum allowed size (256KB)", False,
                 id="a Read past its size limit"),
])
def test_what_is_not_a_failure_of_anything(tool: object, error: str, not_failure: bool) -> None:
    assert not_a_failure(tool, error) is not_failure
