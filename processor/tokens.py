"""Engram's one token estimate: one token per 4 characters, rounded up.

A leaf module so that the SessionStart hook's digest and the episode builder share the rule without
the hook importing the episode builder (and, through it, apsw).
"""

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
