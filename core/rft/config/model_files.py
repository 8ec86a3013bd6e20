"""Is a local model folder complete? Its files are looked at, nothing is loaded.

A model folder needs a tokenizer (``tokenizer.json``, ``tokenizer.model``, ``vocab.json``
…) and, where its model is loaded, ``config.json`` (a JSON object) and weights:

- ``model.safetensors``, or shards listed in ``model.safetensors.index.json``. A
  safetensors file starts with 8 bytes, the little-endian length ``n`` of a JSON header
  that gives each tensor's ``data_offsets`` ``[begin, end)`` in the data after it; the
  file is whole when its size is ``8 + n + max(end)``. Only the header is read.
- ``pytorch_model.bin`` (or the shards of ``pytorch_model.bin.index.json``): present and
  not empty; a zip archive (torch's format since 1.6) must read as one.

:func:`model_folder_problem` says what is wrong in one line (``None`` when nothing is),
so that ``rft validate`` and the start of ``rft run`` name the path instead of a
transformers traceback.
"""

from __future__ import annotations

import json
import os
import zipfile

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")
"""Files any one of which holds a tokenizer's vocabulary (fast, sentencepiece, BPE, WordPiece)."""

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
TORCH_BIN_INDEX = "pytorch_model.bin.index.json"

MAX_HEADER_BYTES = 100 * 2**20
"""Largest safetensors header taken as one (the format's own limit is 100 MB)."""


def safetensors_problem(path: str) -> str | None:
    """What is wrong with the safetensors file ``path`` (header and size), or ``None``."""
    name = os.path.basename(path)
    if not os.path.isfile(path):
        return f"{name} is missing"
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{name} is truncated: {size} bytes, no safetensors header"
        length = int.from_bytes(head, "little")
        if length > MAX_HEADER_BYTES or 8 + length > size:
            return (f"{name} is truncated or not a safetensors file: its header says "
                    f"{length} bytes, the file has {size}")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{name}: the safetensors header is not JSON ({exc})"
    if not isinstance(header, dict):
        return f"{name}: the safetensors header is not a JSON object"
    ends = [entry["data_offsets"][1] for key, entry in header.items()
            if key != "__metadata__" and isinstance(entry, dict)
            and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2
            and isinstance(entry["data_offsets"][1], int)]
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return (f"{name} is truncated: its tensors end at byte {expected}, the file has "
                f"{size} bytes")
    if size > expected:
        return f"{name} is damaged: {size - expected} bytes follow its last tensor"
    return None


def _index_problem(folder: str, index_name: str, check: bool) -> str | None:
    """The shards of a weights index: listed, present, and (safetensors) whole."""
    try:
        with open(os.path.join(folder, index_name), encoding="utf-8") as handle:
            index = json.load(handle)
        shards = sorted(set(index["weight_map"].values()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
            AttributeError) as exc:
        return f"{index_name} cannot be read as a weights index ({type(exc).__name__}: {exc})"
    if not shards:
        return f"{index_name} lists no weight files"
    for shard in shards:
        shard_path = os.path.join(folder, str(shard))
        if not os.path.isfile(shard_path):
            return f"{shard} (listed in {index_name}) is missing"
        problem = safetensors_problem(shard_path) if check else _torch_bin_problem(shard_path)
        if problem is not None:
            return problem
    return None


def _torch_bin_problem(path: str) -> str | None:
    name = os.path.basename(path)
    if os.path.getsize(path) == 0:
        return f"{name} is empty"
    with open(path, "rb") as handle:
        zipped = handle.read(2) == b"PK"
    if zipped and not zipfile.is_zipfile(path):  # the central directory sits at the end
        return f"{name} is truncated (its zip archive has no end)"
    return None


def weights_problem(folder: str) -> str | None:
    """What is wrong with the folder's weights, or ``None`` when they look whole."""
    if os.path.isfile(os.path.join(folder, SAFETENSORS_INDEX)):
        return _index_problem(folder, SAFETENSORS_INDEX, check=True)
    if os.path.isfile(os.path.join(folder, SAFETENSORS)):
        return safetensors_problem(os.path.join(folder, SAFETENSORS))
    if os.path.isfile(os.path.join(folder, TORCH_BIN_INDEX)):
        return _index_problem(folder, TORCH_BIN_INDEX, check=False)
    if os.path.isfile(os.path.join(folder, TORCH_BIN)):
        return _torch_bin_problem(os.path.join(folder, TORCH_BIN))
    return (f"no weights ({SAFETENSORS}, {SAFETENSORS_INDEX}, {TORCH_BIN} or "
            f"{TORCH_BIN_INDEX})")


def _config_problem(folder: str) -> str | None:
    config = os.path.join(folder, "config.json")
    if not os.path.isfile(config):
        return " has no config.json: not a model folder"
    try:
        with open(config, encoding="utf-8") as handle:
            parsed = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f": config.json cannot be read ({exc})"
    if not isinstance(parsed, dict):
        return ": config.json is not a JSON object"
    return None


def model_folder_problem(key: str, path: str, *, weights: bool = True,
                         tokenizer: bool = True) -> str | None:
    """One line naming ``key`` and ``path`` when the local model folder at ``path`` is not
    complete (see the module docstring); ``None`` when it is, or when ``path`` is not here
    (a Hub id, or a path checked elsewhere). ``weights``: the folder's model is loaded
    (``config.json`` and weights are needed); ``tokenizer``: its tokenizer is."""
    folder = os.path.expanduser(path)
    if not os.path.exists(folder):
        return None
    where = f"{key}: {path!r}"
    if not os.path.isdir(folder):
        return f"{where} is a file, not a model folder (config.json, tokenizer and weights)"
    if not os.listdir(folder):
        return f"{where} is an empty folder, not a model folder"
    if weights:  # a folder that only gives a tokenizer (a remote model's) needs no config
        problem = _config_problem(folder)
        if problem is not None:
            return f"{where}{problem}"
    if tokenizer and not any(os.path.isfile(os.path.join(folder, name))
                             for name in TOKENIZER_FILES):
        return f"{where} has no tokenizer ({', '.join(TOKENIZER_FILES[:3])} or another)"
    if weights:
        problem = weights_problem(folder)
        if problem is not None:
            return f"{where}: {problem}"
    return None


__all__ = ["model_folder_problem", "safetensors_problem", "weights_problem"]
