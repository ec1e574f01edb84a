"""Errors of the memory layer, importable without loading numpy or llama.cpp."""


class EmbedderError(Exception):
    """The embedding model cannot be used; the message names the file and the fix."""


class EmbeddingMismatch(EmbedderError):
    """Stored vectors were made by another model than the configured one."""


class UnknownEpisode(LookupError):
    """No such memory, or it was forgotten; the message says which and what to do."""
