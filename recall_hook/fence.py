"""The marker around every text Engram injects into a Claude Code session.

Claude Code writes hook output back into the transcript (as attachments or
system reminders); the capture layer drops anything inside this fence so that
Engram never captures, and so never remembers, its own recollections.
"""

FENCE_OPEN = "<engram-recollection>"
FENCE_CLOSE = "</engram-recollection>"


def fence(text: str) -> str:
    return f"{FENCE_OPEN}\n{text}\n{FENCE_CLOSE}"
