"""A local checkpoint (``model.source=path``) identified by its content.

The identity is a sha256 over, for every file that decides tokens, its name and the sha256 of its whole content
(streamed in 1 MiB blocks): the weights (``*.safetensors``, ``*.bin``, ``*.gguf``, ``*.pt``, ``*.pth`` and their
index), ``config.json``, ``generation_config.json``, the tokenizer (``tokenizer.json``, ``tokenizer_config.json``,
``tokenizer.model``, ``vocab.*``, ``merges.txt``, ``special_tokens_map.json``, ``added_tokens.json``,
``*.tiktoken``) and the chat template (``chat_template.jinja``, ``chat_template.json``, or inside
``tokenizer_config.json``). Any other file of the folder (a README, a licence) is left out.

Hashing is the one-time cost (docs/sample_cache.md states it per GB): each file's hash is remembered by (real path,
size, mtime, ctime, inode, device) in ``<$SNAPSTREAM_CACHE>/file_sha256.json``, so a second run reads no weight
file. The memo is used only when it is a regular file owned by this user and writable by nobody else; a damaged one
is ignored (the files are hashed again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.config.private_files import untrusted

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
NAMES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
         "merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
         "model.safetensors.index.json", "pytorch_model.bin.index.json")
MEMO = "file_sha256.json"
BLOCK = 1 << 20


def decides_tokens(name: str) -> bool:
    """Whether a checkpoint file named ``name`` is part of its identity."""
    return (name in NAMES or name.endswith(WEIGHT_SUFFIXES) or name.startswith("vocab.")
            or name.endswith(".tiktoken"))


def decides_tokenization(name: str) -> bool:
    """Whether a checkpoint file named ``name`` is part of its identity and not a weight file: what a random-weight
    model built on that folder's tokenizer reads of it (the tokenizer, chat template and configs: ``AutoTokenizer``
    reads ``config.json`` for the tokenizer's class)."""
    return decides_tokens(name) and not name.endswith(WEIGHT_SUFFIXES) and "index.json" not in name


def stream_sha256(path: Path) -> str:
    """sha256 of a whole file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _read_memo(path: Path) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}
    why = untrusted(path, st, "file")
    if why:
        log.warning("%s %s: not used (checkpoint files are hashed again)", path, why)
        return {}
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(path: Path, memo: dict[str, Any]) -> None:
    """Replace the memo atomically (a private temporary file, renamed over); an OSError only costs a re-hash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(memo, fh)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        log.warning("%s: checkpoint hashes not remembered (%s)", path, exc)


def checkpoint_sha256(root: Path, memo_dir: Path, include: Callable[[str], bool] = decides_tokens) -> str:
    """The content identity of the checkpoint folder ``root`` (hex sha256) over its files whose name ``include``
    accepts (default: every file that decides tokens), hashing only files whose stamp the memo in ``memo_dir`` does
    not hold."""
    memo_path = memo_dir / MEMO
    memo = _read_memo(memo_path)
    changed = False
    parts = []
    for f in sorted(root.iterdir()):
        if not include(f.name) or not f.is_file():
            continue
        real = os.path.realpath(f)
        stamp = _stamp(os.stat(real))
        known = memo.get(real)
        if isinstance(known, dict) and known.get("stamp") == stamp and isinstance(known.get("sha256"), str):
            digest = known["sha256"]
        else:
            log.info("hashing %s (%.2f GB, once: remembered by path, size, mtime and inode)", f, stamp[0] / 1e9)
            digest = stream_sha256(Path(real))
            memo[real] = {"stamp": stamp, "sha256": digest}
            changed = True
        parts.append(f"{f.name}:{digest}")
    if changed:
        _write_memo(memo_path, memo)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
