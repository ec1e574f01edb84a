"""Where the project's file of a name is: the path a failed call missed, and the file told for it."""

from __future__ import annotations

import pytest

from processor.hook_kit.where_files import folder_key, folder_lines, missing_folder, missing_path, where_lines


@pytest.mark.parametrize(("tool", "tool_input", "error", "missed"), [
    pytest.param("Read", {"file_path": "/p/a/12.6-CONTEXT.md"}, "File does not exist.", "/p/a/12.6-CONTEXT.md",
                 id="a Read's own path"),
    pytest.param("Bash", {}, "Exit code 1\ncat: notes/a.md: No such file or directory", "notes/a.md", id="cat"),
    pytest.param("Bash", {}, "ls: cannot access 'x/y.md': No such file or directory", "x/y.md", id="GNU ls"),
    pytest.param("Bash", {}, "ls: /Users/me/x.md: No such file or directory", "/Users/me/x.md", id="BSD ls"),
    pytest.param("Bash", {}, "(eval):1: no such file or directory: ./run.sh", "./run.sh", id="zsh running a path"),
    pytest.param("Bash", {}, "Error: ENOENT: no such file or directory, open '/a/b.json'", "/a/b.json", id="node"),
    pytest.param("Bash", {}, "sed: can't read foo.txt: No such file or directory", "foo.txt", id="sed"),
    pytest.param("Bash", {}, "(eval):1: no matches found: .planning/phases/12.2-*/*-PLAN.md", None,
                 id="a glob that matched nothing: no one path"),
    pytest.param("Bash", {}, "zsh:1: command not found: psql", None, id="a program not found"),
    pytest.param("Read", {"file_path": "/p/big.md"}, "File content (56293 tokens) exceeds maximum allowed tokens",
                 None, id="another failure of a Read"),
])
def test_the_path_a_failed_call_missed(tool: str, tool_input: dict, error: str, missed: str | None) -> None:
    assert missing_path(tool, tool_input, error) == missed


FILES = [["apps/web/src/components/file-browser/FileBrowser.tsx", "2026-02-15", "s1"],
         ["apps/web/src/index.ts", "2026-02-15", "s1"], ["apps/api/src/index.ts", "2026-02-14", "s2"],
         ["packages/crypto/src/index.ts", "2026-02-13", "s2"]]


@pytest.mark.parametrize(("missed", "told"), [
    pytest.param("/p/apps/web/src/components/files/FileBrowser.tsx",
                 "/p/apps/web/src/components/file-browser/FileBrowser.tsx", id="the one file of the name"),
    pytest.param("apps/web/src/lib/index.ts", "apps/web/src/index.ts",
                 id="of three, the one in the missed path's folders, as the call named it (relative)"),
    pytest.param("apps/mobile/src/index.ts", None, id="two that fit as well: none"),
    pytest.param("/p/apps/web/src/index.ts", None, id="the missed path is the file worked on: none"),
    pytest.param("/p/docs/Notes", None, id="a name without an extension (a folder, a program): none"),
])
def test_the_file_told_for_a_missed_path(missed: str, told: str | None) -> None:
    lines = where_lines(missed, FILES, "/p", "s3")
    assert [line for _, line in lines] == ([] if told is None else [
        f"- `{missed}` is not there: this project's `{missed.rpartition('/')[2]}` is `{told}` "
        f"(worked on {'2026-02-15' if 'web' in told else '2026-02-14'})."])


def test_a_file_only_this_session_worked_on_is_not_told() -> None:
    assert where_lines("/p/FileBrowser.tsx", FILES, "/p", "s1") == []


@pytest.mark.parametrize(("error", "folder"), [
    pytest.param("Exit code 1\n(eval):1: no matches found: /p/.planning/phases/12-mfa/*-PLAN.md",
                 "/p/.planning/phases/12-mfa", id="a glob in a folder that is not there"),
    pytest.param("ls: .planning/phases/12-mfa/: No such file or directory", ".planning/phases/12-mfa",
                 id="a folder listed"),
    pytest.param("cat: notes/a.md: No such file or directory", None, id="a file: looked up by its name instead"),
    pytest.param("(eval):1: no matches found: *.log", None, id="a glob with no folder"),
])
def test_the_folder_a_failed_call_missed(error: str, folder: str | None) -> None:
    assert missing_folder("Bash", {}, error) == folder


@pytest.mark.parametrize(("name", "key"), [
    ("12-multi-factor-authentication", "12/"), ("12.2-encrypted-device-registry", "12.2/"),
    ("0007_add_users", "0007/"), ("src", None), ("v2", None), ("2026", None),
])
def test_a_folder_is_looked_up_by_the_number_that_starts_its_name(name: str, key: str | None) -> None:
    assert folder_key(name) == key


def test_the_folder_told_for_a_missed_one_is_the_only_one_of_its_number_beside_it() -> None:
    folders = [[".planning/phases/12-multi-factor-authentication", "2026-02-12", "s1"],
               ["docs/12-notes", "2026-02-12", "s1"], [".planning/phases/13-a", "2026-02-13", "s1"],
               [".planning/phases/13-b", "2026-02-13", "s2"]]
    [(_, told)] = folder_lines("/p/.planning/phases/12-mfa", folders, "/p", "s3")
    assert told == ("- `/p/.planning/phases/12-mfa/` is not there: this project's folder of that number is "
                    "`/p/.planning/phases/12-multi-factor-authentication/` (worked on 2026-02-12).")
    assert folder_lines(".planning/phases/13-c", folders, "/p", "s3") == []  # two of that number
    assert folder_lines(".planning/phases/14-x", folders, "/p", "s3") == []  # none
    assert folder_lines(".planning/phases/12-mfa", folders, "/p", "s1") == []  # only this session worked there
