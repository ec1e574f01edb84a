"""A repository's git remote as the name of its project across folders and machines.

Two clones of one repository, at different paths on one machine or on different machines (over ssh on one,
https on the other), are one project: ``git@GitHub.com:Org/App.git``, ``https://me@github.com/Org/App`` and
``ssh://git@github.com:22/Org/App.git`` all become ``github.com/Org/App`` (no scheme, no user or password, no
port, no ``.git``, the host in lower case; the path keeps its case). A local path or ``file://`` URL is no remote.

The remote is read from the repository's ``config`` file (``[remote "origin"]``, else the first remote by name),
not by running git: capture asks once per repository and a subprocess would cost more than the read. Git's
``url.<base>.insteadOf`` rewriting is not applied (``processor/share/projects.py`` asks git itself for what it
shares). A URL with credentials in it (``https://user:token@host/o/r``) is read here and only its key leaves this
module: the URL itself is never returned, stored or logged.

Stdlib only (the hooks' kit).
"""

import os.path

# user@host:path, git's scp-like form (its path never starts with //).
_SCP_LIKE = r"^(?:(?P<user>[^@/]+)@)?(?P<host>[^:/]+):(?P<path>(?!//).+)$"


def normalise_remote(url: str) -> str | None:
    """The remote as a project key, or None for something that is not a remote URL (a local path)."""
    url = url.strip()
    if not url:
        return None
    if "://" in url:
        from urllib.parse import urlsplit  # here: only a repository's first resolution reads a remote

        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError:  # a malformed port or bracket
            return None
        if parts.scheme == "file" or not hostname:
            return None
        host, path = hostname.lower(), parts.path
    else:
        import re

        match = re.match(_SCP_LIKE, url)
        if not match or "/" in match.group("host") or url.startswith(("/", ".", "~")):
            return None
        host, path = match.group("host").lower(), match.group("path")
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    path = path.rstrip("/")
    return f"{host}/{path}" if path else host


def _config_remotes(common_dir: str) -> dict[str, str]:
    """remote name → its url, from ``<common dir>/config`` (the first url of each remote)."""
    try:
        with open(os.path.join(common_dir, "config"), encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return {}
    remotes: dict[str, str] = {}
    section: str | None = None
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            header = line[1:line.find("]")] if "]" in line else ""
            kind, _, sub = header.partition(" ")
            if kind.lower() == "remote" and sub.strip().startswith('"'):
                section = sub.strip().strip('"')
            elif kind.lower().startswith("remote."):  # the old [remote.origin] form
                section = kind[len("remote."):]
            else:
                section = None
            continue
        if section is None:
            continue
        key, equals, value = line.partition("=")
        if equals and key.strip().lower() == "url" and section not in remotes:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            remotes[section] = value
    return remotes


def remote_key(common_dir: str | None) -> str | None:
    """The project key of the repository whose git common dir this is: its ``origin`` remote, else its first remote
    by name, normalised; None without a remote (the repository is then known by its path only)."""
    if not common_dir:
        return None
    remotes = _config_remotes(common_dir)
    for name in (["origin"] if "origin" in remotes else []) + sorted(remotes):
        key = normalise_remote(remotes[name])
        if key:
            return key
    return None
