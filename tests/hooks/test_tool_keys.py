"""What a tool call works on, as the keys lessons are filed under (processor/hook_kit/tool_keys.py): files and
commands of every agent's tools, each case a row."""

from __future__ import annotations

import pytest

from processor.hook_kit import hook_io
from processor.hook_kit.tool_keys import assigned, command_keys, hook_bypass, kind_key, ran_below, tool_keys


@pytest.mark.parametrize(("name", "tool_input"), [
    ("Bash", {"command": "git add dist/app.js"}),
    ("run_shell_command", {"command": "git add dist/app.js"}),   # Gemini
    ("exec_command", {"cmd": "git add dist/app.js"}),           # Codex, as its rollout records it
])
def test_a_shell_call_has_the_same_keys_in_every_agent(name: str, tool_input: dict) -> None:
    keys = tool_keys(*hook_io.call_of({"tool_name": name, "tool_input": tool_input}), "/repo")
    assert keys == tool_keys("Bash", {"command": "git add dist/app.js"}, "/repo")
    assert keys[:2] == ["cmd:git add", "file:dist/app.js"]


def _keys(tool: str, tool_input: dict, root: str | None = None) -> list[str]:
    """A call's keys as the hook finds them: its tool named as Claude Code names it (hook_io.call_of)."""
    return tool_keys(*hook_io.call_of({"tool_name": tool, "tool_input": tool_input}), root)


def test_file_tools_and_patches_have_file_keys() -> None:
    # Gemini's file tools have the keys of Claude Code's.
    assert _keys("read_file", {"file_path": "/repo/src/cart.ts"}, "/repo") == \
        tool_keys("Read", {"file_path": "/repo/src/cart.ts"}, "/repo")
    assert _keys("read_file", {"file_path": "/repo/src/cart.ts"}, "/repo")[0] == "file:src/cart.ts"
    assert _keys("write_file", {"file_path": "/repo/src/new.ts", "content": "x"}, "/repo")[0] == "file:src/new.ts"
    assert _keys("replace", {"file_path": "src/cart.ts", "old_string": "a", "new_string": "b"})[0] == \
        "file:src/cart.ts"
    assert _keys("grep_search", {"pattern": "TODO", "dir_path": "/repo/src"}, "/repo") == \
        tool_keys("Grep", {"pattern": "TODO", "path": "/repo/src"}, "/repo") == ["file:src", "name:todo"]
    # A patch, through the shell or as Codex's own tool, works on each file it names.
    patch = ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/cart.ts\n@@\n-a\n+b\n"
             "*** Add File: /repo/src/new.ts\n+x\n*** End Patch\nEOF")
    through_shell = tool_keys("Bash", {"command": patch}, "/repo")
    assert through_shell[:2] == ["file:src/cart.ts", "file:src/new.ts"]
    assert tool_keys("apply_patch", {"input": patch.split("\n", 1)[1]}, "/repo") == through_shell


ROOT = "/home/u/shop"


@pytest.mark.parametrize(("command", "keys"), [
    pytest.param("uv run pytest -q tests/test_cart.py", ["cmd:uv run pytest", "file:tests/test_cart.py"],
                 id="a runner and the tool it runs, and the file named"),
    pytest.param("cd /home/u/shop && source .venv/bin/activate && python -m pytest -x", ["cmd:python -m pytest"],
                 id="where a chain goes and what it sets up name nothing"),
    pytest.param("npm run build 2>&1 | tail -20", ["cmd:npm run build"], id="a pipe into a look-around command"),
    pytest.param("ls -la src && cat README.md", ["file:README.md"], id="look-around commands: no cmd key"),
    pytest.param("FOO=1 sudo ./start.sh --port 8080", ["cmd:start.sh", "file:start.sh"],
                 id="variables and wrappers skipped; a script is a program"),
    pytest.param("npx tsc --noEmit", ["cmd:npx tsc"], id="a runner without a subcommand of its own"),
    pytest.param("uv sync", ["cmd:uv sync"], id="a runner's own subcommand"),
    pytest.param("pnpm --filter api test -- --testPathPattern='auth.service.spec'", ["cmd:pnpm test"],
                 id="where a package manager runs is skipped: the subcommand is the key (cipher-box)"),
    pytest.param("pnpm --filter=@cipherbox/api exec jest auth", ["cmd:pnpm exec jest auth"],
                 id="a scope option with its value in one word, then the runner"),
    pytest.param("git -C /home/u/shop status", ["cmd:git status", "file:."],
                 id="git -C dir: the subcommand is the key"),
    pytest.param("python3 manage.py migrate", ["cmd:python", "file:manage.py"], id="python3 read as python"),
    pytest.param("export PATH=/opt/bin:$PATH && cargo build --release", ["cmd:cargo build"],
                 id="an option ends the subcommand words"),
    pytest.param("echo 'a && b' ; make test", ["cmd:make test"], id="no split inside quotes"),
    pytest.param("cat <<'EOF' > notes.txt\nrm -rf /\nEOF", [], id="a heredoc's body is text, not commands"),
    pytest.param("pytest " + " ".join(f"tests/test_{i}.py" for i in range(12)),
                 ["cmd:pytest", *(f"file:tests/test_{i}.py" for i in range(7))], id="at most eight keys"),
])
def test_the_keys_of_a_command_line(command: str, keys: list[str]) -> None:
    assert command_keys(command, ROOT) == keys


@pytest.mark.parametrize(("tool", "tool_input", "keys"), [
    pytest.param("Read", {"file_path": "/home/u/shop/src/cart/totals.py"},
                 ["file:src/cart/totals.py", "dir:src/cart/", "name:totals"],
                 id="a file inside the project: relative, with its folder and name"),
    pytest.param("Read", {"file_path": "/etc/hosts"}, ["file:/etc/hosts", "dir:/etc/", "name:hosts"],
                 id="a file outside the project: as it is"),
    pytest.param("Edit", {"file_path": "./src/app.ts", "old_string": "a", "new_string": "b"},
                 ["file:src/app.ts", "dir:src/"], id="no leading ./; a name too short to mean one thing"),
    pytest.param("NotebookEdit", {"notebook_path": "/home/u/shop/notebooks/Explore.ipynb"},
                 ["file:notebooks/Explore.ipynb", "dir:notebooks/", "name:explore"], id="a notebook"),
    pytest.param("Grep", {"pattern": "ConnCase", "path": "/home/u/shop/test/support/conn_case.ex"},
                 ["file:test/support/conn_case.ex", "name:conncase", "dir:test/support/"],
                 id="a search confined to one file, for a name"),
    pytest.param("Grep", {"pattern": "ConnCase"}, ["name:conncase"], id="a search for a plain identifier"),
    pytest.param("Grep", {"pattern": "foo.*bar"}, [], id="a search for a pattern"),
    pytest.param("Glob", {"pattern": "**/*.py", "path": "src"}, [], id="a glob over a folder"),
    pytest.param("Bash", {"command": "git add src/cart.py"},
                 ["cmd:git add", "file:src/cart.py", "prog:git", "dir:src/", "name:cart"],
                 id="a command with its program and the file's folder and name"),
    pytest.param("Bash", {"command": "git add -A && git commit -m wip"},
                 ["cmd:git add", "cmd:git commit", "prog:git", "cmd:git add -A"], id="staging everything"),
    pytest.param("Bash", {"command": "git commit -am 'fix cart totals'"},
                 ["cmd:git commit", "prog:git", "cmd:git commit -a"], id="committing everything"),
    pytest.param("WebFetch", {"url": "https://example.com"}, [], id="a tool that works on no file"),
    pytest.param("Bash", {"command": 42}, [], id="a command that is not text"),
    pytest.param("Bash", "ls", [], id="an input that is not a mapping"),
    pytest.param(None, {"command": "ls"}, [], id="no tool"),
])
def test_the_keys_of_a_tool_call(tool: object, tool_input: object, keys: list[str]) -> None:
    assert tool_keys(tool, tool_input, ROOT) == keys


def test_a_command_after_many_files_keeps_its_key() -> None:
    """cipher-box staged seven files and committed in one call: the `git commit` is the call's too."""
    files = " ".join(f"apps/api/src/part{n}.ts" for n in range(9))
    keys = command_keys(f'git add {files} && git commit -m "x"')
    assert keys[0] == "cmd:git add" and "cmd:git commit" in keys and len(keys) == 8, keys


@pytest.mark.parametrize(("command", "bypass"), [
    ('SKIP=end-of-file-fixer git add README.md && SKIP=end-of-file-fixer git commit -m "x"', "SKIP=end-of-file-fixer"),
    ('cd /repo && git commit --no-verify -m "Fix CI"', "--no-verify"),
    ("git commit -n -m x", "-n"),
    ("HUSKY=0 git push", "HUSKY=0"),
    ("git -c core.hooksPath=/dev/null commit -m x", "core.hooksPath=/dev/null"),
    ('git commit -m "--no-verify is not the way"', None),
    ("git log -n 3", None),
    ("SKIP=x npm test", None),
])
def test_how_a_command_skips_the_commit_hooks(command: str, bypass: str | None) -> None:
    assert hook_bypass(command) == bypass


@pytest.mark.parametrize(("segment", "names", "core"), [
    ("DB_HOST=10.0.0.5 REDIS_HOST=10.0.0.5 pnpm --filter api dev 2>&1", ["DB_HOST", "REDIS_HOST"],
     "pnpm --filter api dev"),
    ('CORS_ALLOWED_ORIGINS="http://localhost:5173, http://x" pnpm --filter api dev', ["CORS_ALLOWED_ORIGINS"],
     "pnpm --filter api dev"),
    ('pnpm --filter api dev &>/tmp/api.log & echo "started"', [], "pnpm --filter api dev"),
])
def test_the_variables_a_command_sets_and_the_command_without_them(segment: str, names: list[str],
                                                                   core: str) -> None:
    assert assigned(segment) == (names, core)


@pytest.mark.parametrize(("path", "key"), [
    (".planning/phases/12.2-encrypted-device-registry/12.2-CONTEXT.md", "kind:#-context.md"),
    ("migrations/0007_add_index.py", "kind:#_add_index.py"),
    ("claude-dev-log-diary/day-004.md", "kind:day-#.md"),
    ("src/app.py", None),
    ("docs/v2.md", None),
])
def test_a_file_named_by_a_number_has_a_kind(path: str, key: str | None) -> None:
    assert kind_key(path) == key


@pytest.mark.parametrize(("command", "cwd", "found"), [
    ("git add apps/web/src/components/file-browser/FileBrowser.tsx && git commit -m 'fix(12.2): mount the hook'",
     "/Users/michael/Code/cipher-box/apps/web", ("apps/web", "/Users/michael/Code/cipher-box")),
    ("git add apps/web/src/FileBrowser.tsx", "/Users/michael/Code/cipher-box/.worktrees/phase-12.2/apps/web",
     ("apps/web", "/Users/michael/Code/cipher-box/.worktrees/phase-12.2")),  # a worktree's folder alike
    ("uv run pytest test/test_template_rendering.py -v", "/Users/dain/workspace/claude-code-log/test",
     ("test", "/Users/dain/workspace/claude-code-log")),
    ("git add apps/web/src/FileBrowser.tsx", "/Users/michael/Code/cipher-box", None),  # run where its paths start
    ("cd /Users/michael/Code/cipher-box && git add apps/web/src/x.tsx", "/Users/michael/Code/cipher-box/apps/web",
     None),  # it went to a folder of its own first
    ("git add src/x.tsx", "/Users/michael/Code/cipher-box/apps/web", None),
    ("curl -s http://localhost:3000/web/health", "/srv/app/web", None),
])
def test_a_call_run_below_the_folder_its_paths_start_from(command: str, cwd: str,
                                                           found: tuple[str, str] | None) -> None:
    assert ran_below(command, cwd) == found
