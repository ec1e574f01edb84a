"""The secret-finding rules: what ``processor.redaction.redact`` replaces in captured text.

Engram keeps what Claude Code sessions say and do: tool output, files read, shell commands.
That text routinely holds credentials (``env`` output, a ``.env`` file, a database URL in a
stack trace). Once written to Engram's SQLite store a secret would outlive the session, be
summarised by an LLM and be recalled into later sessions, so it is removed before anything keeps it
(the door is ``processor/redaction/__init__.py``; this module only finds and replaces).

``scrub(text)`` replaces each secret with ``[REDACTED:<kind>]`` and keeps the context that makes
a memory useful: the key of ``password=...``, the user and host of ``postgres://user:pw@host``.
For credential-shaped strings it prefers a stray false positive to a leak; ordinary developer
text (hashes, UUIDs, ``token = None``, ``password: str``) is left alone. A second pass never
changes the output, and no string makes it raise.

It runs on every captured message, so it has to be cheap. Patterns are compiled once, at import,
and each starts with a literal: CPython's ``re`` then skips to occurrences of that literal with a
fast substring search, so the literal is the rule's prefilter and text without it costs one quick
scan. (A combined alternation, or a character class in first place, makes ``re`` attempt a match
at every character; one combined prefilter measured slower than all the literal scans together.)
Case-insensitive keys are spelled with character classes and anchored on a rare letter (the ``k``
of ``token``), because ``(?i)`` loses the fast search too. Matching runs on UTF-8 bytes, one byte
per character rather than the two or four of a ``str`` holding emoji. Repeats are possessive or
bounded and tokens are tried only from the start of a run, so the cost stays linear on any input.

Beyond the hand-written rules, the prefix-anchored token formats of gitleaks' rule set (MIT) are
generated into ``secret_rules/gitleaks_rules.py`` by ``secret_rules/generate.py``; rules whose
prefixes share their first two bytes sit behind one scan, since every scan of the text costs alike.
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import ahocorasick_rs

from processor.redaction.secret_rules.gitleaks_rules import RULES as _GITLEAKS_RULES

__all__ = ["REDACTION_KINDS", "scrub"]

_TOKEN_CHARS = "A-Za-z0-9_-"
_TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_T = f"[{_TOKEN_CHARS}]"


def _ci(word: str) -> str:
    """``word`` case-insensitively, with character classes."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _token(prefix: str, body: str) -> str:
    """A token: ``prefix`` (fixed width, starting with a literal), not glued to a token
    character before it, then ``body``. The boundary is checked after the prefix so the pattern
    still starts with a literal, and only the start of a run of token characters can match,
    which keeps scans of runs like ``eyJeyJeyJ...`` linear."""
    return f"{prefix}(?<![{_TOKEN_CHARS}]{prefix}){body}"


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# ---- value checks (on decoded values) ---------------------------------------------------------

_PLACEHOLDER = re.compile(
    r"""\s*(?:
        \$\{[^}]*\}|\$\(?[A-Za-z_]\w*\)?                             # ${VAR}, $VAR, $(VAR)
      | %\w+%|%\(\w+\)[sd]|%[sd]|\{\{.*\}\}|\{[\w.]*\}|<[^<>]*>    # %VAR%, %(x)s, {{ x }}, {x}, <x>
      | \[REDACTED:[a-z0-9-]+\]
      | \*+|x+|X+|-+|_+|\#+|\#[0-9a-fA-F]{3,8}                          # masks, colours
      | .*(?:\.\.\.|…).*                                             # elided: sk-..., abc…
      | .*(?:XXXXXX|xxxxxx).*                                        # pnu_XXXXXXXX, sha256~xxxx_PUT_...
      | [\w.~-]{0,16}?(\w)\1{15,}=*                                  # glc_1111111111111111...
      | -?\d+(?:\.\d+)?
      | (?i:none|null|nil|undefined|true|false)
    )\s*""",
    re.VERBOSE,
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# Token prefixes with a dot (``dp.pt.``, ``hvs.``): a value starting so is a token, not a path.
_DOTTED_TOKEN_PREFIXES = ("SG.", *sorted({prefix for _, prefix, *_ in _GITLEAKS_RULES if "." in prefix}))
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*/?")
_AWS_SECRET_KEY_NAME = re.compile(r"(?:se)?cret[_-]?access[_-]?key", re.IGNORECASE)
_AWS_SECRET_VALUE = re.compile(r"[A-Za-z0-9/+]{40}")
# An HTTP header (``-H "X-API-Key: ..."``) is a key mid-line; the match starts at its ``k``.
_API_KEY_HEADER = re.compile(rb"[Aa][Pp][Ii]-\Z")
_STRING_PREFIXES = frozenset({"f", "r", "b", "u", "rb", "br", "fr", "rf"})
_MORE_WORDS = re.compile(rb" [A-Za-z]")
_LINE_KEY = re.compile(rb"""[ \t]*(?:[-*][ \t]+)?["']?[\w.-]*""")
_NAME_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")
_SECRET_NAME_PARTS = frozenset(
    {"pass", "password", "passwd", "pwd", "secret", "token", "key", "apikey", "auth", "cred", "credentials"}
)
_LITERAL_WORDS = frozenset(
    {
        *("none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off"),
        *("str", "string", "bytes", "int", "integer", "float", "bool", "boolean", "number"),
        *("any", "object", "secretstr", "required", "optional", "value", "example", "changeme"),
    }
)


def _is_placeholder(value: str) -> bool:
    return len(value.strip()) < 3 or _PLACEHOLDER.fullmatch(value) is not None


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _looks_random(value: str) -> bool:
    """A digit or mixed case after the first letter: true of real tokens, false of words like
    ``authentication`` or ``Optional``."""
    rest = value[1:]
    return _has_digit(value) or (rest.lower() != rest and rest.upper() != rest)


def _names_a_secret(identifier: str) -> bool:
    """``db_password``, ``apiKey``, ``GITHUB_TOKEN``: a variable holding a secret, not one."""
    return any(part.lower() in _SECRET_NAME_PARTS for part in _NAME_PARTS.findall(identifier))


def _key_starts_line(data: bytes, pos: int) -> bool:
    """Whether the key ending near ``pos`` begins its line, as YAML keys do."""
    low = max(0, pos - 160)
    newline = data.rfind(b"\n", low, pos)
    if newline < 0 and low > 0:
        return False
    return _LINE_KEY.fullmatch(data, newline + 1, pos) is not None


def _is_attribute_path(value: str) -> bool:
    """``settings.DB_PASSWORD``, ``os.environ.get``, ``self.token``: an attribute path, not a
    literal. Every part must read as a name a programmer wrote: no digit, unless it is snake_case
    (``db2_password``) or names a secret (``self.token2``), and not a long mixed-case run. Secrets
    with dots fail that: ``hunter2.abc`` (a digit glued into a word), ``hvs.CAESIP...``, and a value
    that starts with a token prefix (``dp.pt.``, ``hvs.``) is never a path, whatever its letters."""
    if not _DOTTED.fullmatch(value) or value.startswith(_DOTTED_TOKEN_PREFIXES):
        return False
    for part in value.split("."):
        if _has_digit(part) and "_" not in part and not _names_a_secret(part):
            return False
        if len(part) > 24 and _looks_random(part):
            return False
    return True


def _random_word(value: str) -> bool:
    """A value no annotation or prose word looks like: 8 characters or more, with a digit, a letter and mixed case
    or a symbol (``Tr0ub4dor&3``): ``passwd: Tr0ub4dor&3`` mid-sentence is still a password."""
    if len(value) < 8 or not _has_digit_and_letter(value):
        return False
    return _looks_random(value) or any(not c.isalnum() and c not in "._-" for c in value)


def _is_reference(m: re.Match[bytes], value: str) -> bool:
    """Whether an unquoted assignment value is code or config plumbing rather than a literal
    secret: ``token=token``, ``password=self.password``, ``token = None``, ``password: str``,
    ``api_key=os.environ["KEY"]``, ``pwd=/home/me``, ``secret=${SECRET}``, ``f(password=pw)``."""
    sep = m["sep"].decode("latin-1")
    following = m.string[m.end() : m.end() + 1].decode("latin-1")
    if following in ("(", "[") or (following in "\"'" and value.lower() in _STRING_PREFIXES):
        return True  # a call, a subscript, a string prefix (f"...")
    lowered = value.lower()
    if lowered in _LITERAL_WORDS or value[0] in "$%/~.*-" or value[-1] == ":" or _is_placeholder(value):
        return True
    if _is_attribute_path(value):
        return True
    prose_word = value.rstrip(".,;:!?")
    if not sep.strip() and prose_word.isalpha() and prose_word.islower():
        return True  # "pass --token for a non-interactive login": a flag named in prose
    if ":" in sep and "=" not in sep:
        if (not _key_starts_line(m.string, m.start()) and not _API_KEY_HEADER.search(m.string, 0, m.start())
                and not _random_word(value)):
            return True  # a colon mid-line is prose or a type annotation, not a YAML key or a header
        if value.isalpha() and value.islower() and _MORE_WORDS.match(m.string, m.end()):
            return True  # "token: uses an existing ...": a sentence
    if _IDENTIFIER.fullmatch(value):
        if _names_a_secret(value) or (following and following in ",)}]"):
            return True  # password=db_password, f(password=pw)
        if not _has_digit(value):
            if ":" in sep and value[0].isupper():
                return True  # token: Token
            if "=" in sep and sep != sep.strip(" \t"):
                return True  # token = tok
    return False


# ---- rules ------------------------------------------------------------------------------------


_MARKER_START = b"[REDACTED:"


def _marker(kind: str) -> bytes:
    return f"[REDACTED:{kind}]".encode()


def _splice(m: re.Match[bytes], group: str | int, marker: bytes) -> bytes:
    """The matched text with ``group`` replaced by ``marker``."""
    start, whole = m.start(), m[0]
    return whole[: m.start(group) - start] + marker + whole[m.end(group) - start :]


_Replace = Callable[[re.Match[bytes]], bytes | None]  # None: not a secret after all


def _substitute(pattern: re.Pattern[bytes], replace: _Replace, data: bytes) -> bytes:
    """``pattern.sub(replace, data)``, except that a match ``replace`` turns down (None) is not
    skipped whole: the search resumes after its ``key`` group, so a key inside a rejected value
    (``token = None api_key = x``) still gets its turn. Otherwise what a rule skips would depend on
    what other rules had already redacted, and a second pass could redact more."""
    pieces: list[bytes] = []
    done = pos = 0
    resume_after_key = "key" in pattern.groupindex
    while (m := pattern.search(data, pos)) is not None:
        replacement = replace(m)
        if replacement is None:
            pos = m.end("key") if resume_after_key else max(m.end(), m.start() + 1)
            continue
        pieces += (data[done : m.start()], replacement)
        done = pos = max(m.end(), m.start() + 1)
    return b"".join([*pieces, data[done:]]) if pieces else data


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    patterns: tuple[re.Pattern[bytes], ...]
    replace: _Replace

    def apply(self, data: bytes) -> bytes:
        for pattern in self.patterns:
            # Most text holds no candidate: one C-level search, no Python call chain.
            if pattern.search(data) is not None:
                data = _substitute(pattern, self.replace, data)
        return data


def _rule(
    kind: str,
    *patterns: str,
    group: str | int = 0,
    check: Callable[[str], bool] | None = None,
    checked: str | int | None = None,
) -> _Rule:
    """Replace ``group`` of each match with the marker, if ``check`` agrees that the text of
    group ``checked`` (by default ``group``) is a secret."""
    marker = _marker(kind)
    checked_group = group if checked is None else checked

    def replace(m: re.Match[bytes]) -> bytes | None:
        if check is not None and not check(_decode(m[checked_group])):
            return None
        return marker if group == 0 else _splice(m, group, marker)

    return _Rule(kind, tuple(re.compile(p.encode()) for p in patterns), replace)


class _DiscordBotTokenRule:
    """``<base64 user id>.<6 chars>.<27+ chars>``. The first segment has no literal to search
    for, so the rule finds the ``.`` starting the second segment and looks back for the first,
    which it accepts only if it decodes to a numeric user id."""

    kind = "discord-bot-token"
    _tail = re.compile(rf"\.{_T}{{6}}\.{_T}{{27,40}}(?!{_T})".encode())

    def apply(self, data: bytes) -> bytes:
        pieces, done = [], 0
        for m in self._tail.finditer(data):
            start = head = m.start()
            while head > max(done, start - 29) and data[head - 1] in _TOKEN_BYTES:
                head -= 1
            glued = head > done and data[head - 1] in _TOKEN_BYTES
            run = data[head:start]
            if not glued and 24 <= len(run) <= 28 and run[0] in b"MNO" and self._is_user_id(run):
                pieces += [data[done:head], _marker(self.kind)]
                done = m.end()
        return b"".join([*pieces, data[done:]]) if pieces else data

    @staticmethod
    def _is_user_id(segment: bytes) -> bool:
        padded = segment.replace(b"-", b"+").replace(b"_", b"/") + b"=" * (-len(segment) % 4)
        try:
            return binascii.a2b_base64(padded).isdigit()
        except (binascii.Error, ValueError):
            return False


def _entropy(value: bytes) -> float:
    """Shannon entropy in bits per character, as gitleaks computes it."""
    counts = [value.count(c) for c in set(value)]
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts)


class _HeadRule:
    """A token whose distinctive literal comes after a fixed run of characters, such as HashiCorp's
    ``<14 chars>.atlasv1.<rest>`` or Telegram's ``<bot id>:AA<rest>``. The pattern starts at the
    literal (so ``re`` can scan for it); the head is checked by walking back, as the Discord rule
    does, and must start a run of token characters (or follow one of ``allowed_before``)."""

    def __init__(
        self,
        kind: str,
        pattern: str,
        head: frozenset[int],
        widths: tuple[int, int],
        *,
        entropy: float = 0.0,
        allowed_before: tuple[bytes, ...] = (),
    ) -> None:
        self.kind = kind
        self._pattern = re.compile(pattern.encode())
        self._head, self._widths, self._entropy = head, widths, entropy
        self._allowed_before = allowed_before

    def apply(self, data: bytes) -> bytes:
        pieces, done = [], 0
        low, high = self._widths
        for m in self._pattern.finditer(data):
            start = head = m.start()
            while head > max(done, start - high) and data[head - 1] in self._head:
                head -= 1
            if not low <= start - head <= high or head < done:
                continue
            before = data[max(0, head - 8) : head]
            glued = head > 0 and data[head - 1] in _TOKEN_BYTES and not before.endswith(self._allowed_before)
            if glued or (head > done and data[head - 1] in self._head):
                continue  # mid-token, or a head longer than the format allows
            if self._entropy and _entropy(data[head : m.end()]) <= self._entropy:
                continue
            pieces += [data[done:head], _marker(self.kind)]
            done = m.end()
        return b"".join([*pieces, data[done:]]) if pieces else data


def _class_bytes(char_class: str) -> frozenset[int]:
    members = re.compile(char_class.encode())
    return frozenset(b for b in range(128) if members.fullmatch(bytes([b])))


class _PrefixIndex:
    """Rules each anchored on a literal prefix, behind one multi-prefix scan of the text.

    Each ``re`` scan of the text costs about the same whatever it looks for, so one scan per
    generated rule (85 of them) tripled redaction's cost. One Aho-Corasick pass (``ahocorasick_rs``,
    SIMD-prefiltered, several GB/s) finds every prefix at once; only the rules whose prefix occurs
    then run, and most text holds none."""

    kind = "gitleaks-prefixes"

    def __init__(self, rules: list[tuple[str, _Rule | _HeadRule]]) -> None:
        self.rules = [rule for _, rule in rules]
        self._automaton = ahocorasick_rs.BytesAhoCorasick([prefix.encode() for prefix, _ in rules])

    def apply(self, data: bytes) -> bytes:
        found = {index for index, _, _ in self._automaton.find_matches_as_indexes(data, overlapping=True)}
        for index in sorted(found):
            data = self.rules[index].apply(data)
        return data


def _gitleaks_rules() -> _PrefixIndex:
    """The rules generated from gitleaks (processor/redaction/secret_rules): one per prefix, each
    starting with its literal prefix, only at the start of a run of token characters, and ending
    where the run ends. gitleaks' entropy floor turns down placeholders such as ``hvs.xxxx...``."""
    rules: list[tuple[str, _Rule | _HeadRule]] = []
    for kind, prefix, body, head_width, head_class, entropy in _GITLEAKS_RULES:
        literal = re.escape(prefix)
        # The token ends where its run does. A dot may follow (the end of a sentence), but not a
        # dot and a word (``video_box.ico-<hex>.png`` is a file name, as gitleaks' trailer knows).
        tail = f"{body}(?![{_TOKEN_CHARS}]|\\.[A-Za-z0-9])"
        if head_width:
            head = _class_bytes(head_class)
            rules.append((prefix, _HeadRule(kind, literal + tail, head, (head_width, head_width), entropy=entropy)))
            continue

        def check(token: str, floor: float = entropy) -> bool:
            return _entropy(token.encode()) > floor

        rules.append((prefix, _rule(kind, _token(literal, tail), check=check if entropy else None)))
    return _PrefixIndex(rules)


# ---- assignments: password=..., "token": "...", api_key: ..., --token ... -------------------

# After the keyword: an optional suffix (secret_key, access_token, SecretAccessKey), the key's end.
_KEY_SUFFIX = (
    rf"(?:[_-]?(?:{_ci('access')}[_-]?)?"
    rf"(?:{_ci('key')}|{_ci('token')}|{_ci('secret')}))?(?![\w-])"
)
# Then `=`, `:`, `:=` or `=>`, perhaps after a closing quote or bracket (`"token": `,
# `config["token"] = `, `\"token\": ` in escaped JSON), never `==` or `::`; then a quoted value or
# a bare one. A bare value stops at `&` only where another query parameter follows.
_ASSIGNED_VALUE = (
    r"""(?P<sep>(?:\\?["']\]?)?[ \t]*(?::=|=>|=(?!=)|:(?![:=]))[ \t]*)"""
    r"""(?:\\?"(?P<dq>[^"\n]*?)\\?"|\\?'(?P<sq>[^'\n]*?)\\?'"""
    r"""|(?P<bare>(?:[^\s"'`,;&|()\[\]{}<>\\]|&(?![\w.-]+=))++))"""
)
# Command-line flags take their value after a space: --password hunter2, --api-key "...".
_FLAG_KEYWORDS = ("password", "passwd", "pass", "secret", "token", "api-key", "apikey")
_FLAG = (
    rf"--(?:[A-Za-z0-9]+-)*(?P<key>{'|'.join(map(_ci, _FLAG_KEYWORDS))}){_KEY_SUFFIX}"
    r"""(?P<sep>[ \t]+)(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>(?!-)[^\s"'`;&|()<>\\]++))"""
)


def _keyword_patterns(anchor: str, keywords: list[tuple[str, str]]) -> list[str]:
    """Assignment patterns for ``keywords`` (the letters before and after ``anchor``, rare letters
    inside each keyword), one per case of ``anchor``. A match starts at the anchor and a
    lookbehind checks the letters before it: ``k(?<=[Tt][Oo].)[Ee][Nn]``. Starting mid-key is
    harmless, since keys are kept and only the value after them is replaced."""
    width = "." * len(anchor)
    alternatives = "|".join(f"(?<={_ci(before)}{width}){_ci(after)}" for before, after in keywords)
    cases = (anchor.lower(), anchor.upper())
    return [f"(?P<key>{case}(?:{alternatives}){_KEY_SUFFIX}){_ASSIGNED_VALUE}" for case in cases]


def _assignment_kind(key: str, value: str) -> str:
    """The kind for a key: the whole keyword (``--token``) or its tail from the anchor on,
    w(ord), w(d), ass, c(ret), k(en) or k(ey)."""
    name = key.lower()
    if name.startswith(("w", "ass", "pass")):
        return "password-assignment"
    if name.startswith(("c", "secret")):
        aws = _AWS_SECRET_KEY_NAME.fullmatch(name) and _AWS_SECRET_VALUE.fullmatch(value)
        return "aws-secret-access-key" if aws else "secret-assignment"
    return "token-assignment" if name.startswith(("ken", "token")) else "api-key-assignment"


def _is_type_name(value: str, m: re.Match[bytes]) -> bool:
    """``token: "Token"``: a quoted annotation."""
    if b":" not in m["sep"] or not value[:1].isupper() or _has_digit(value):
        return False
    return _IDENTIFIER.fullmatch(value) is not None


def _replace_quoted(m: re.Match[bytes], kind: str) -> bytes | None:
    """The ``sq``, ``dq`` or ``bare`` value of ``m`` replaced, unless it is a placeholder."""
    group = next(g for g in ("dq", "sq", "bare") if m[g] is not None)
    if _is_placeholder(_decode(m[group])):
        return None
    return _splice(m, group, _marker(kind))


def _replace_assignment(m: re.Match[bytes]) -> bytes | None:
    group = next(g for g in ("dq", "sq", "bare") if m[g] is not None)
    value = _decode(m[group])
    kind = _assignment_kind(_decode(m["key"]), value)
    if group == "bare":
        if kind != "aws-secret-access-key" and _is_reference(m, value):
            return None
    elif _is_placeholder(value) or _PATH.fullmatch(value) or _is_type_name(value, m):
        return None
    return _splice(m, group, _marker(kind))


_ASSIGNMENTS = _Rule(
    "assignment",  # one of _ASSIGNMENT_KINDS, chosen per match
    tuple(
        re.compile(pattern.encode())
        for anchor, keywords in [
            ("w", [("pass", "ord"), ("pass", "d"), ("p", "d")]),  # password, passwd, pwd
            ("ass", [("p", "")]),  # DB_PASS; "password" fails at the key's end
            ("c", [("se", "ret")]),
            # api_key, app_key (Laravel's APP_KEY, Datadog's DD_APP_KEY), application_key,
            # encryption_key: each a name given only to a secret.
            (
                "k",
                [
                    *(("to", "en"), ("api_", "ey"), ("api-", "ey"), ("api", "ey")),
                    *(("app_", "ey"), ("app-", "ey"), ("app", "ey"), ("application_", "ey")),
                    *(("encryption_", "ey"), ("encryption", "ey")),
                ],
            ),
        ]
        for pattern in _keyword_patterns(anchor, keywords)
    )
    + (re.compile(_FLAG.encode()),),
    _replace_assignment,
)

# ---- a key next to its service's name ----------------------------------------------------------

# gitleaks' keyword-context rules for services whose keys have no prefix (datadog-access-token,
# twilio's auth token) look for the service's name, a few name characters, an assignment and the
# key. Here the service's name is the rule's literal anchor (so the rule costs a substring scan),
# and two contexts count:
# - a key word after the name, in the same clause (no ``. ``, ``;`` or ``!`` between them): ``datadog
#   app key``, ``TWILIO_AUTH_TOKEN``, ``twilio sid AC… auth token``; then the key, directly (``: ``,
#   ``=``, a space) or after a few words of which the last links it (``is``, ``to``, ``as``…) or that
#   end in a colon: "My Datadog app key, in case you need it, is <key>", "the datadog key for the
#   dashboards: <key>". A word that does not link ("see commit <sha>", "rotation landed in <sha>")
#   leaves the hex alone;
# - gitleaks' own: the name, up to 20 name characters and an assignment operator (``datadog_app =
#   "<key>"``, ``TWILIO: <hex>``).
_SECRET_WORDS = ("key", "token", "secret", "auth", "credential", "password")
# The key word starts a word or a camelCase part (``apiKey``): not the "key" of "monkey".
_SECRET_WORD = "|".join([*(rf"(?<![A-Za-z]){_ci(w)}" for w in _SECRET_WORDS),
                         *(w.capitalize() for w in _SECRET_WORDS)])
# Checked first at each position: most characters start no key word, and then no alternative is tried.
_SECRET_INITIALS = "".join(sorted({c for w in _SECRET_WORDS for c in (w[0], w[0].upper())}))
_LINK_WORD = "|".join(_ci(w) for w in ("is", "was", "are", "to", "be", "as", "it's", "its", "use", "here"))
# Between the key's name and the key: separators, perhaps one linking word (``DD_APP_KEY is <key>``).
_LINK = rf"(?:[^\w\n]{{1,8}}+(?:(?:{_LINK_WORD})(?![\w'])[^\w\n]{{1,4}}+)?|[^\w\n]{{0,8}}+)"
_CLAUSE = r"(?:[^\n.;!]|\.(?=[^\s.]))"  # a dot inside a name (datadoghq.eu) does not end the clause


def _service_context(value: str) -> str:
    """What may follow a service's name up to its key (group ``v``, one of the shapes in ``value``)."""
    words = (rf"(?:[^\w\n.;!]{{1,8}}+[\w']{{1,12}}+){{0,6}}?"
             rf"(?:[^\w\n.;!]{{1,8}}+(?:{_LINK_WORD})(?![\w'])|[ \t]*+:)")
    return (
        rf"(?:{_CLAUSE}{{0,60}}?(?=[{_SECRET_INITIALS}])(?:{_SECRET_WORD})\w{{0,20}}+(?:{words})?"
        rf"""|[\w \t.-]{{0,20}}?[\s'"]{{0,3}}(?::{{1,3}}=|=>|\?=|=(?!=)|:(?!:)|>))"""
        rf"[^\w\n]{{0,8}}+(?P<v>{value})(?![A-Za-z0-9])"
    )


def _name_cases(service: str) -> tuple[tuple[str, str], ...]:
    """(lookbehind for the first letter, the rest): ``datadog``/``Datadog``, ``DATADOG``."""
    return ((f"[{service[0]}{service[0].upper()}]", service[1:]), (service[0].upper(), service[1:].upper()))


def _has_digit_and_letter(value: str) -> bool:
    return _has_digit(value) and any(c.isalpha() for c in value)


# The shape every service's key next to its name was caught in before the per-service shapes: 32 hex digits,
# optionally 8 more or two -groups of 8. It stays caught, with the check it had (a digit).
_SERVICE_HEX = "[a-f0-9]{32}(?:[a-f0-9]{8}|(?:-[a-f0-9]{8}){2})?"


def _service_key(value: str) -> bool:
    """A service's key: its hex shape with a digit, any other shape with a digit and a letter."""
    return _has_digit(value) if re.fullmatch(_SERVICE_HEX, value) else _has_digit_and_letter(value)


# ---- keys with no prefix, told by what surrounds them (issue 26) ---------------------------------
#
# A key with no prefix of its own (a 64-hex-digit encryption key, a base64 application key, a 32-hex-digit auth
# token) is told from a hash, a UUID or a checksum only by where it stands. Three places say "this is a key"
# as clearly as a prefix does:
# - a command line: the value of a flag named key (``--key``, ``--master-key=``, not ``--key-file`` or
#   ``apt-key``) or an argument of a key-setting subcommand (``key:set``, ``secrets set NAME VALUE``);
# - a sentence that names it as a credential (``the application key is <hex>``, ``the signing secret: <b64>``):
#   "key" counts only after a word that makes it a credential (api, app, signing…), never a cache, primary or
#   sort key; "token", "secret", "password" count alone;
# - a quoted argument of a service client's constructor (``Client(sid, "<hex>")``, ``new Pusher(…)``).
# In each place only a strong value is replaced: single-case hex of 32 digits or more, or a run of 20 or more
# base64 characters with digits, several upper- and lower-case letters and the spread of a random string.

_STRONG_HEX = re.compile(r"[a-f0-9]{32,}|[A-F0-9]{32,}")
_CREDENTIAL_KEY = frozenset(
    "api app application access secret private signing encryption decryption master license licence client "
    "service auth authentication deploy deployment admin account webhook sdk bot production prod live developer "
    "subscription integration server shared hmac jwt".split())
_KEY_WORDS = ("key", "token", "secret", "password", "passphrase", "credential")
_KEY_SUBCOMMANDS = ("set", "put", "add", "create", "import", "update")
_CANDIDATE = r"(?:base64:)?[A-Za-z0-9+/_=-]{20,400}+"


def _strong(value: str) -> bool:
    """A value that reads as a random key: long single-case hex, or long base64 with the mix of a random string."""
    value = value.removeprefix("base64:")
    if _STRONG_HEX.fullmatch(value):
        return _has_digit_and_letter(value)
    if len(value) < 20:
        return False
    upper, lower = sum(c.isupper() for c in value), sum(c.islower() for c in value)
    return _has_digit(value) and upper >= 3 and lower >= 3 and _entropy(value.encode()) >= 3.5


def _splice_value(m: re.Match[bytes], group: str, kind: str) -> bytes | None:
    """The match with ``group`` (after a ``base64:`` it may start with, which is kept) replaced, if strong."""
    value = _decode(m[group])
    if not _strong(value):
        return None
    if not value.startswith("base64:"):
        return _splice(m, group, _marker(kind))
    start, whole = m.start(), m[0]
    return whole[: m.start(group) - start + 7] + _marker(kind) + whole[m.end(group) - start :]


def _word_before(data: bytes, pos: int) -> str:
    """The word that ends before ``pos`` (over spaces, ``_`` and ``-``): the qualifier of a key word."""
    end = pos
    while end > 0 and data[end - 1 : end] in (b" ", b"_", b"-", b"\t"):
        end -= 1
    start = end
    while start > 0 and (chr(data[start - 1]).isalnum()):
        start -= 1
    return data[start:end].decode("latin-1").lower()


def _replace_named_key(m: re.Match[bytes]) -> bytes | None:
    if m[0][:3].lower() == b"key" and _word_before(m.string, m.start()) not in _CREDENTIAL_KEY:
        return None  # a cache, primary, sort or partition key: a hash there is not a secret
    return _splice_value(m, "v", "named-key")


# After the key word: a few words of which the last links it to the value (is, was, to…), or a colon.
_NAMED_CONTEXT = (rf"s?(?![\w-])(?:(?:[^\w\n.;!]{{1,8}}+[\w']{{1,12}}+){{0,6}}?"
                  rf"(?:[^\w\n.;!]{{1,8}}+(?:{_LINK_WORD})(?![\w'])|[ \t]*+:))[^\w\n]{{0,8}}+"
                  rf"(?P<v>{_CANDIDATE})(?![A-Za-z0-9+/=])")
# One rule per spelling of each word, its literal first: the Aho-Corasick gate runs only those whose word occurs.
_NAMED_KEYS = tuple(
    _Rule("named-key", (re.compile(f"{case}(?P<key>){_NAMED_CONTEXT}".encode()),), _replace_named_key)
    for word in _KEY_WORDS for case in (word, word.capitalize(), word.upper()))

# --key VALUE, --master-key=VALUE, --encryption-key "VALUE"; a continued line (``\`` newline) is a space.
_KEY_FLAG_VALUE = (r"""(?P<sep>(?:[ \t]|\\\r?\n)++|=)(?:"(?P<dq>[^"\n]{1,400}+)"|'(?P<sq>[^'\n]{1,400}+)'"""
                   rf"""|(?P<bare>{_CANDIDATE}))(?![^\s"'])""")


def _replace_key_flag(m: re.Match[bytes]) -> bytes | None:
    start = m.start()
    while start > 0 and (chr(m.string[start - 1]).isalnum() or m.string[start - 1 : start] == b"-"):
        start -= 1
    if not m.string[start:m.start()].startswith(b"-") or (start and not m.string[start - 1 : start].isspace()):
        return None  # apt-key, a-key: a word, not a flag
    group = next(g for g in ("dq", "sq", "bare") if m[g] is not None)
    return _splice_value(m, group, "cli-key")


def _replace_subcommand_args(m: re.Match[bytes]) -> bytes | None:
    """``key:set base64:…``, ``secrets set NAME VALUE``, ``secrets:set NAME=VALUE``: every strong argument."""
    args, changed = m["args"], False
    pieces: list[bytes] = []
    done = 0
    for arg in re.finditer(rb"(?:[A-Za-z_][\w.-]*=|base64:)?(?P<v>[^\s=\"']+=*)", args):
        if _strong(_decode(arg["v"])):
            pieces += [args[done:arg.start("v")], _marker("cli-key")]
            done, changed = arg.end("v"), True
    if not changed:
        return None
    return m.string[m.start():m.start("args")] + b"".join([*pieces, args[done:]])


_CLI_KEY = _Rule(
    "cli-key",
    (*(re.compile(f"-{case}s?(?![\\w-]){_KEY_FLAG_VALUE}".encode()) for case in ("key", "Key", "KEY")),),
    _replace_key_flag,
)
_KEY_SUBCOMMANDS_RULES = tuple(
    _Rule("cli-key", (re.compile(
        rf"{case}s?[: ](?:{'|'.join(_KEY_SUBCOMMANDS)})(?![\w-])(?P<args>[^\n;&|]{{1,400}}+)".encode()),),
        _replace_subcommand_args)
    for word in ("key", "secret", "token") for case in (word, word.capitalize()))

# A constructor's argument list with a quoted argument in it, after the end of a client's name (a literal each,
# so the gate runs the rule only on text that has one); the whole callee is checked by walking back.
# No closing parenthesis is needed: a call cut off mid-way (a truncated line) still names its client.
_CLIENT_ARGS = r"""\((?P<args>[^()\n"']{0,200}+(?:(?:"[^"\n]{0,400}+"|'[^'\n]{0,400}+')[^()\n"']{0,200}+)++)"""
_CLIENT_CALLS = tuple(re.compile(f"{end}{_CLIENT_ARGS}".encode()) for end in (
    "lient", "LIENT", "Api", "API", "api", "SDK", "Sdk", "ervice", "Bot", "Auth", "onnection"))
_NEW_CLIENT_CALL = re.compile(f"new [A-Z][A-Za-z0-9_.]{{0,60}}+{_CLIENT_ARGS}".encode())
_QUOTED = re.compile(rb"""(["'])(?P<v>[A-Za-z0-9+/_=.-]{20,400})\1""")
_CLIENT_SUFFIXES = ("api", "sdk", "service", "bot", "auth", "connection")


def _is_client_constructor(data: bytes, pos: int) -> bool:
    """Whether the call opening at ``pos`` makes a service's client: ``…Client(``, ``…Api(``/``…SDK(``, or
    ``new Name(``."""
    start = pos
    while start > 0 and (chr(data[start - 1]).isalnum() or data[start - 1 : start] in (b"_", b".")):
        start -= 1
    callee = data[start:pos].decode("latin-1").rsplit(".", 1)[-1]
    if not callee:
        return False
    if "client" in callee.lower() or callee.lower().endswith(_CLIENT_SUFFIXES):
        return True
    return callee[0].isupper() and data[max(0, start - 4):start] == b"new "


def _replace_client_arguments(m: re.Match[bytes]) -> bytes | None:
    if not _is_client_constructor(m.string, m.start("args") - 1):
        return None
    args, pieces, done = m["args"], [], 0
    for quoted in _QUOTED.finditer(args):
        if _strong(_decode(quoted["v"])):
            pieces += [args[done:quoted.start("v")], _marker("client-argument")]
            done = quoted.end("v")
    if not pieces:
        return None
    return m.string[m.start():m.start("args")] + b"".join([*pieces, args[done:]])


_CLIENT_ARGUMENTS = tuple(_Rule("client-argument", (pattern,), _replace_client_arguments)
                          for pattern in (*_CLIENT_CALLS, _NEW_CLIENT_CALL))


# ---- the rule table ---------------------------------------------------------------------------

_PEM_BEGIN = "-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = "-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_AUTH_SCHEME = "|".join(_ci(s) for s in ("bearer", "basic", "token", "bot", "digest", "apikey"))

# Order matters: specific formats come first, so `Authorization: Bearer eyJ...` is reported as a
# jwt, and generic assignments last. No rule matches a marker, so a second pass changes nothing.
_RULES: tuple[_Rule | _DiscordBotTokenRule | _HeadRule | _PrefixIndex, ...] = (
    # The whole PEM block. A block cut off before its END line loses its base64 lines.
    _rule(
        "private-key",
        rf"{_PEM_BEGIN}(?:(?:[A-Za-z0-9+/=\s\\:,.]|-(?!----))*+{_PEM_END}"
        r"|(?:(?:\\n|\r?\n)[A-Za-z0-9+/=]++(?![^\s\\]))++)",
    ),
    _rule("jwt", _token("eyJ", rf"{_T}{{8,}}+\.{_T}{{8,}}+\.{_T}*+")),
    _rule("anthropic-api-key", _token("sk-ant-", rf"{_T}{{20,}}+")),
    _rule(
        "openai-api-key",
        _token("sk-", rf"(?P<v>(?:proj|svcacct|admin)-{_T}{{20,}}+|[A-Za-z0-9]{{20,}}+)"),
        check=_has_digit,
        checked="v",
    ),
    _rule("google-api-key", _token("AIza", rf"{_T}{{35}}(?!{_T})")),
    _rule("google-oauth-client-secret", _token("GOCSPX-", rf"{_T}{{20,}}+")),
    _rule("aws-access-key", _token("A[KS]IA", "[A-Z0-9]{16}(?![A-Za-z0-9])")),
    # aws_secret_access_key=... is found by the assignment rule, which knows the key.
    _rule(
        "github-token",
        _token("gh[pousr]_", "[A-Za-z0-9_]{30,}+"),
        _token("github_pat_", "[A-Za-z0-9_]{30,}+"),
    ),
    # With the routable form's ``.<version><checksum>`` suffix (glpat-<27..300>.01abcdefg).
    _rule("gitlab-token", _token("gl", rf"(?:pat|ptt|dt|rt)-{_T}{{20,}}+(?:\.[0-9a-z]{{9}}(?![{_TOKEN_CHARS}]))?")),
    _rule("slack-token", _token("xox[abposer]-", "(?P<v>[A-Za-z0-9-]{10,}+)"), check=_has_digit, checked="v"),
    _rule(
        "slack-webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/+-]{16,}+)",
        group="v",
    ),
    _rule(
        "discord-webhook",
        r"discord(?:app)?\.com/api/webhooks/(?P<v>\d{5,}/[A-Za-z0-9_-]{20,}+)",
        group="v",
    ),
    _DiscordBotTokenRule(),
    _rule(
        "stripe-key",
        *(_token(prefix, "[A-Za-z0-9]{16,}+") for prefix in ("sk_(?:live|test)_", "rk_(?:live|test)_")),
        _token("whsec_", "[A-Za-z0-9]{16,}+"),
    ),
    _rule(
        "npm-token",
        _token("npm_", "(?P<v>[A-Za-z0-9]{36})(?![A-Za-z0-9])"),
        check=_has_digit,
        checked="v",
    ),
    _rule("pypi-token", _token("pypi-AgEIcHlwaS5vcmc", rf"{_T}{{50,}}+")),
    _rule(
        "huggingface-token",
        _token("hf_", "(?P<v>[A-Za-z0-9]{30,}+)(?![_-])"),
        check=_has_digit,
        checked="v",
    ),
    _rule("sendgrid-api-key", _token(r"SG\.", rf"{_T}{{16,32}}\.{_T}{{30,60}}(?!{_T})")),
    _rule("twilio-api-key", _token("SK", "[0-9a-fA-F]{32}(?![A-Za-z0-9])")),
    _rule("digitalocean-token", _token("do[por]_v1_", "[a-f0-9]{64}(?![A-Za-z0-9])")),
    _rule(
        "azure-storage-key",
        r"Key=(?:(?<=AccountKey=)|(?<=SharedAccessKey=))(?P<v>[A-Za-z0-9+/]{20,}+={0,2})",
        group="v",
    ),
    _rule("docker-hub-token", _token("dckr_", rf"(?:pat|oat)_{_T}{{20,}}+")),
    _rule(
        "mailgun-api-key",
        *(_token(prefix, "[a-f0-9]{32}(?![A-Za-z0-9])") for prefix in ("key-", "pubkey-")),
        check=_has_digit,
    ),
    # AC<account sid>:<auth token>, as curl -u and the Twilio CLI take them, and the two arguments of
    # Twilio's Client('AC<sid>', '<token>').
    _rule(
        "twilio-auth-token",
        _token("AC", r"""[a-f0-9]{32}(?::|['"]?[ \t]*,[ \t]*['"]?)(?P<v>[a-f0-9]{32})(?![A-Za-z0-9])"""),
        group="v",
    ),
    # <bot id>:AA<33 chars>, bare or in https://api.telegram.org/bot<token>/.
    _HeadRule(
        "telegram-bot-token",
        rf":AA{_T}{{33}}(?!{_T})",
        frozenset(b"0123456789"),
        (6, 12),
        allowed_before=(b"bot",),
    ),
    # A key next to its service's name (see _service_context): "Twilio auth token is <hex>", "datadog api
    # key: <hex>", "set DD_APP_KEY to <key>".
    *(
        _rule(
            f"{service}-key",
            *(rf"{tail}(?<={lead}{tail}){_service_context(f'{_SERVICE_HEX}|{value}')}"
              for lead, tail in _name_cases(service)),
            *extra,
            group="v",
            check=_service_key,
        )
        for service, value, extra in (
            # Datadog: API keys are 32 hex digits, application keys 40 (gitleaks takes any 40 letters
            # and digits); DD_API_KEY / DD_APP_KEY, the agent's variables, name the service too.
            ("datadog", "[A-Za-z0-9]{40}|[A-Fa-f0-9]{32}", (
                rf"[Dd][Dd]_(?<![A-Za-z0-9][Dd][Dd]_)(?:{_ci('app')}|{_ci('api')}|{_ci('application')})_"
                rf"{_ci('key')}(?![\w-])\\?[\"']?{_LINK}(?P<v>[A-Za-z0-9]{{40}}|[A-Fa-f0-9]{{32}})(?![A-Za-z0-9])",
            )),
            # Twilio: auth tokens are 32 hex digits, API key secrets 32 letters and digits.
            ("twilio", "[A-Za-z0-9]{32}", ()),
            ("mailgun", "[a-f0-9]{32}(?:(?:-[a-f0-9]{8}){2})?", ()),
        )
    ),
    # mysql -pPASSWORD (no space: with one, mysql prompts and the next word is the database).
    _Rule(
        "mysql-password",
        (
            re.compile(
                rf"""mysql(?<![{_TOKEN_CHARS}]mysql)[^\n|;&]{{0,200}}?[ \t]-p"""
                r"""(?:'(?P<sq>[^'\n]+)'|"(?P<dq>[^"\n]+)"|(?P<bare>[^\s'"`;|&]+))""".encode()
            ),
        ),
        lambda m: _replace_quoted(m, "mysql-password"),
    ),
    _gitleaks_rules(),
    # curl -u user:password, --user user:password
    _rule(
        "cli-user-password",
        *(
            rf"""{flag}(?<![{_TOKEN_CHARS}]{flag})(?:[ \t]+|=|(?=\w))["']?[^\s:'"/@\[\]]+:(?P<v>[^\s'"]+)"""
            for flag in ("-u", "--user")
        ),
        group="v",
        check=lambda value: not _is_placeholder(value),
    ),
    # scheme://user:password@host keeps all but the password, which may itself hold @ and :, so
    # it runs to the last @ before the path.
    _rule(
        "connection-string-password",
        r"""://[^\s:/?#@'"`<>\[\]]*+:(?P<v>[^\s/?#'"`<>]+)@(?=[^\s/?#@'"`<>])""",
        # A password holding "/" (base64 often does). A port and path before an "@" in the path
        # (https://host:8080/@user) are not one: the value may not start with digits and "/". The
        # lookahead bounds the scan for the "@", which keeps "://a:" repeated linear.
        r"""://[^\s:/?#@'"`<>\[\]]*+:(?=[^\s?#'"`<>@]{1,128}@)"""
        r"""(?P<v>(?!\d*/)[^\s/?#'"`<>@]*+(?:/[^\s/?#'"`<>@]*+)++)"""
        r"""@(?=[^\s/?#@'"`<>])""",
        group="v",
        check=lambda value: not _is_placeholder(value),
    ),
    _rule(
        "authorization-header",
        *(
            rf"{z}(?<={_ci('authori')}.){_ci('ation')}"
            rf"""\\?["']?[ \t]*[:=][ \t]*\\?["']?(?:(?:{_AUTH_SCHEME})[ \t]+)?+"""
            r"(?P<v>[A-Za-z0-9._~+/=-]{8,}+)(?![(\[])"
            for z in "zZ"
        ),
        group="v",
        check=_looks_random,
    ),
    _rule(
        "bearer-token",
        rf"earer(?<![{_TOKEN_CHARS}][Bb]earer)(?<=[Bb]earer)"
        r"[ \t]+(?P<v>[A-Za-z0-9._~+/-]{16,}+=*)(?![(\[])",
        group="v",
        check=_looks_random,
    ),
    _ASSIGNMENTS,
    _CLI_KEY,
    *_KEY_SUBCOMMANDS_RULES,
    *_NAMED_KEYS,
    *_CLIENT_ARGUMENTS,
)

# The assignment rule picks one of these per match, by the key.
_ASSIGNMENT_KINDS = (
    "aws-secret-access-key",
    "password-assignment",
    "secret-assignment",
    "token-assignment",
    "api-key-assignment",
)
REDACTION_KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(  # a generated kind can have several rules, one per prefix
        [
            *(
                member.kind
                for rule in _RULES
                if rule is not _ASSIGNMENTS
                for member in (rule.rules if isinstance(rule, _PrefixIndex) else [rule])
            ),
            *_ASSIGNMENT_KINDS,
        ]
    )
)


# ---- the literal gate: a rule runs only where a match of it could start --------------------------

_MAX_OPENINGS = 64  # expansions of character classes beyond this are not worth gating


def _openings(pattern: re.Pattern[bytes]) -> set[bytes] | None:
    """Every literal opening (2+ bytes) a match of ``pattern`` must start with, or None when the
    pattern's start is not such a literal (a single letter, a repeat, a group, case-insensitive).

    Read from ``re``'s own parse of the pattern, so it cannot drift from what the pattern matches;
    zero-width assertions before or inside the opening consume nothing and are passed over."""
    if pattern.flags & re.IGNORECASE:
        return None
    openings: list[bytes] = [b""]
    for op, arg in re._parser.parse(pattern.pattern, pattern.flags):  # type: ignore[attr-defined]
        name = str(op)
        if name in ("ASSERT", "ASSERT_NOT", "AT"):
            continue
        if name == "LITERAL":
            chars = [arg]
        elif name == "IN" and all(str(o) == "LITERAL" for o, _ in arg):
            chars = [c for _, c in arg]
        else:
            break
        if len(openings) * len(chars) > _MAX_OPENINGS:
            break
        openings = [o + bytes([c]) for o in openings for c in chars]
    # Brackets are left out so that an opening can never straddle a marker the gate did not see.
    if len(openings[0]) < 2 or any(b"[" in o or b"]" in o for o in openings):
        return None
    return set(openings)


def _rule_openings(rule: object) -> set[bytes] | None:
    """The union over a plain rule's patterns, or None if any pattern cannot be gated."""
    patterns = getattr(rule, "patterns", None)
    if not isinstance(rule, _Rule) or not patterns:
        return None
    found: set[bytes] = set()
    for pattern in patterns:
        openings = _openings(pattern)
        if openings is None:
            return None
        found |= openings
    return found


class _LiteralGate:
    """The hand-written rules that can only match at a literal opening (``sk-ant-``, ``A[KS]IA``,
    ``-----BEGIN``), behind one Aho-Corasick pass over the text, as the generated rules are: one
    ``re`` scan per rule cost more than the rest of capture. A rule runs when one of its openings
    occurs in the text as it came in; what earlier rules replace only ever adds markers, which no
    opening can match, so the set found up front holds for every rule in order."""

    def __init__(self, rules: tuple[object, ...]) -> None:
        self.gated: set[int] = set()  # positions in rules of the gated ones
        literals: list[bytes] = []
        owners: list[int] = []  # per literal, the position of its rule
        for position, rule in enumerate(rules):
            openings = _rule_openings(rule)
            if openings is None:
                continue
            self.gated.add(position)
            for opening in sorted(openings):
                literals.append(opening)
                owners.append(position)
        self._owners = owners
        self._automaton = ahocorasick_rs.BytesAhoCorasick(literals) if literals else None

        self._always = tuple(position for position in range(len(rules)) if position not in self.gated)
        self._every = tuple(range(len(rules)))

    def to_run(self, data: bytes) -> list[int] | tuple[int, ...]:
        """Positions of the rules to run on ``data``, in order: the ungated ones and the gated ones whose
        opening occurs in it (usually none, so the loop over the rules is short)."""
        if self._automaton is None:
            return self._every
        found = {self._owners[i] for i, _, _ in self._automaton.find_matches_as_indexes(data, overlapping=True)}
        return sorted(found.union(self._always)) if found else self._always


_GATE = _LiteralGate(_RULES)


def _redact_once(data: bytes) -> bytes:
    for position in _GATE.to_run(data):
        data = _RULES[position].apply(data)
    return data


def _line_end(data: bytes, pos: int) -> int:
    end = data.find(b"\n", pos)
    return len(data) if end < 0 else end


def _redact_marked_lines(data: bytes) -> bytes:
    """``_redact_once`` applied to the lines that hold a marker; marked lines less than 4 KB
    apart go through together, to spare the per-call overhead."""
    pieces: list[bytes] = []
    done = 0
    at = data.find(_MARKER_START)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = _line_end(data, at)
        while (at := data.find(_MARKER_START, end, end + 4096)) >= 0:
            end = _line_end(data, at)
        pieces += (data[done:start], _redact_once(data[start:end]))
        done = end
        at = data.find(_MARKER_START, end)
    return b"".join([*pieces, data[done:]])


def scrub(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]`` (see ``REDACTION_KINDS``).

    Keys, URL users and hosts stay readable; only the secret value is replaced. Idempotent, and
    safe on any string, including lone surrogates.
    """
    original = text.encode("utf-8", "surrogatepass")
    data = _redact_once(original)
    if data == original:
        return text
    # Rarely, a redaction exposes a match that the replaced text was hiding (a value that ran into
    # a URL, say). Matches never span lines (a private key block is replaced whole), so settling
    # the lines that hold a marker is enough to make a second call change nothing.
    for _ in range(3):
        settled = _redact_marked_lines(data)
        if settled == data:
            break
        data = settled
    return data.decode("utf-8", "surrogatepass")
