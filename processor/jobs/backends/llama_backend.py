"""The `llama` backend: a local instruct GGUF through llama-cpp-python, JSON-schema constrained.

``llama_model`` is a path to the GGUF. Decoding is constrained by a grammar built from the
request's *bounded* schema (maxItems / maxLength on every string and list), so the answer is
always complete JSON that fits the output cap. Tokens are streamed so the call can be cut at
``llm_timeout_seconds`` (llama.cpp cannot be interrupted otherwise); a cut answer is reported
as a timeout. Local calls cost nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from processor.config import Settings
from processor.jobs.backends.base import BackendError, BackendUnavailable, LLMRequest, LLMResponse

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_TOKENS = 16384
# Room the context keeps beside the prompt: the chat template and the answer (its grammar-bounded output).
ANSWER_ROOM_TOKENS = 4096
# llama.cpp expands maxLength into nested rules; past about 1100 characters its grammar parser
# gives up and sampling then crashes the process (measured with llama-cpp-python 0.3.36).
MAX_GRAMMAR_STRING = 1000


def grammar_safe(schema: Any) -> Any:
    """The schema with every maxLength clamped to what llama.cpp's grammar parser accepts."""
    if isinstance(schema, dict):
        out = {k: grammar_safe(v) for k, v in schema.items()}
        if isinstance(out.get("maxLength"), int):
            out["maxLength"] = min(out["maxLength"], MAX_GRAMMAR_STRING)
        return out
    if isinstance(schema, list):
        return [grammar_safe(v) for v in schema]
    return schema


def trained_context(path: Path) -> int | None:
    """The context length the GGUF's model was trained on (``<arch>.context_length``), or None if unknown."""
    try:
        import gguf

        reader = gguf.GGUFReader(str(path))
        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        return int(reader.fields[f"{arch}.context_length"].parts[-1][0])
    except (KeyError, IndexError, ValueError, OSError, ImportError):
        return None


class LlamaBackend:
    name = "llama"
    billed = False

    def __init__(self, settings: Settings, *, model_path: str | Path | None = None, n_ctx: int | None = None,
                 n_threads: int | None = None, seed: int = 0) -> None:
        raw = str(model_path or settings.llama_model or "")
        if not raw:
            raise BackendUnavailable("extractor 'llama' needs llama_model: the path of an instruct GGUF file")
        path = Path(raw).expanduser()
        if not path.is_file():
            raise BackendUnavailable(f"llama_model {path} does not exist; set llama_model to an instruct GGUF file")
        self.path = path
        self.model = path.name
        # The prompt is bounded by max_prompt_tokens; leave room for the answer and the chat template. Never more
        # than the model was trained on: llama.cpp warns, and past it the model's answers degrade.
        wanted = n_ctx or max(2048, min(DEFAULT_CONTEXT_TOKENS, settings.max_prompt_tokens + ANSWER_ROOM_TOKENS))
        trained = trained_context(path)
        self.n_ctx = min(wanted, trained) if trained else wanted
        # What an extraction prompt may hold here (the extractor cuts its batches to it).
        self.prompt_token_limit: int | None = max(512, self.n_ctx - ANSWER_ROOM_TOKENS) \
            if self.n_ctx < settings.max_prompt_tokens + ANSWER_ROOM_TOKENS else None
        if self.prompt_token_limit is not None:
            log.info("llama_model %s was trained on %d tokens: extraction prompts are cut to %d tokens "
                     "(max_prompt_tokens is %d)", path.name, self.n_ctx, self.prompt_token_limit,
                     settings.max_prompt_tokens)
        # Half the cores: llama.cpp threads spin-wait on each other (see the embedder's note).
        self.n_threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        self.seed = seed
        self._calls = 0
        self._llama: Any = None
        self._load_lock = threading.Lock()

    def _model(self) -> Any:
        with self._load_lock:
            if self._llama is None:
                try:
                    from llama_cpp import Llama
                except ImportError as exc:  # pragma: no cover - a declared dependency
                    raise BackendUnavailable(f"llama-cpp-python is not installed ({exc})") from None
                try:
                    self._llama = Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                        seed=self.seed, verbose=False)
                except (ValueError, RuntimeError, OSError) as exc:
                    raise BackendError(f"cannot load llama_model {self.path}: {exc}; is it an instruct GGUF?") \
                        from None
            return self._llama

    def complete(self, request: LLMRequest) -> LLMResponse:
        llama = self._model()
        deadline = time.monotonic() + request.timeout
        schema = grammar_safe(request.bounded_schema or request.schema)
        messages = [{"role": "system", "content": request.system}, {"role": "user", "content": request.prompt}]
        pieces: list[str] = []
        chunks = 0
        # A new seed per call: a retry samples differently instead of repeating a bad answer exactly.
        self._calls += 1
        try:
            # Streamed so the deadline is checked between tokens: llama.cpp cannot be interrupted otherwise.
            stream = llama.create_chat_completion(
                messages=messages, response_format={"type": "json_object", "schema": schema},
                max_tokens=request.max_output_tokens, temperature=0.2, stream=True, seed=self.seed + self._calls,
            )
            for chunk in stream:
                delta = chunk["choices"][0].get("delta") or {}
                if delta.get("content"):
                    pieces.append(delta["content"])
                    chunks += 1
                if time.monotonic() > deadline:
                    stream.close()
                    raise BackendError(f"llama_model {self.model} did not finish within {request.timeout:g} s "
                                       "(llm_timeout_seconds)")
        except ValueError as exc:  # e.g. the prompt does not fit n_ctx
            raise BackendError(f"llama_model {self.model} rejected the request: {exc}") from None
        tokens_in = sum(len(llama.tokenize(m["content"].encode(), add_bos=False)) for m in messages)
        return LLMResponse(text="".join(pieces), tokens_in=tokens_in, tokens_out=chunks, model=self.model)

    def close(self) -> None:
        with self._load_lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None
