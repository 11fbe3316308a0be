"""The sample cache: a finished sample is stored under its identity and reused by any run that needs the same sample.

A sample is a pure function of (model and weights, method and its effective knobs, the prompt, the sampler, the
seed, the item, the sample index). Its key here is built from the run's identity (:func:`evals.identity.run_identity`)
with what only *selects* items left out (``task.limit``, ``task.n_items``, the hash of all items read) and the item
itself put in (its id and a hash of its content): the prompt is a function of the item, the task settings and the
model, all in the key. ``gen.n_samples`` is left out where sample ``i`` does not depend on it (greedy, or the engine's
counter-based noise keyed on (seed, item, sample, step)). So raising ``task.limit``, adding items, another run
directory or a budget search that revisits a budget all reuse what was generated once.

Where: ``$SNAPSTREAM_SAMPLE_CACHE`` when set, else ``<out_root>/.sample_cache/``. ``sample_cache=false`` (or
``SNAPSTREAM_SAMPLE_CACHE=off``: the test suite sets it, so that runs compared with each other are generated)
neither reads nor writes it; ``overwrite=true`` regenerates (and stores the new samples, which later lookups
prefer). None of these is part of a run's identity. Knobs outside the identity (``gen.rows``, ``gen.batch_size``,
``gen.compile``) reuse samples too: timing another row count needs ``sample_cache=false``.

Storage: 256 append-only JSONL shards (by the item key's first two hex digits), one line per sample holding the row
as its run wrote it and, once per shard and process, the prompt record. A line is appended under ``flock`` with one
``write`` and fsynced, after a newline if a killed writer left a partial line: a torn line is skipped on read, never
joined to the next. Reused rows keep every column of the stored row except ``run_id``/``fingerprint`` (this run's)
and say where they come from in ``cached_from`` (the ``run_id`` of the run that generated them).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.identity import SAMPLERS, items_sha256
from evals.rows import check_measured

log = logging.getLogger(__name__)

ENV = "SNAPSTREAM_SAMPLE_CACHE"
DIRNAME = ".sample_cache"
SELECTION_KEYS = ("limit", "n_items", "data_sha256", "items_read")  # choose which items are read, not what they are
FORMAT = 1


OFF = ("off", "0", "false", "no")  # values of $SNAPSTREAM_SAMPLE_CACHE that turn the cache off


def cache_dir(out_root: str | Path) -> Path | None:
    """``$SNAPSTREAM_SAMPLE_CACHE`` when set (and not empty), else ``<out_root>/.sample_cache``; None when the
    variable turns the cache off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    return Path(value or Path(out_root) / DIRNAME)


def sample_key_base(identity: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's identity that every sample of the run shares (see the module docstring)."""
    gen = dict(identity["gen"])
    if gen.get("sampler") != SAMPLERS["generate"]:  # sample i drawn from its own noise, or greedy
        gen.pop("n_samples", None)
    task = {k: v for k, v in identity["task"].items() if k not in SELECTION_KEYS}
    return {"format": FORMAT, "model": identity["model"], "compression": identity["compression"], "gen": gen,
            "task": task, "backend": identity["backend"], "harness": identity.get("harness")}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class SampleCache:
    """Lookups and appends for one run (``base``: :func:`sample_key_base` of its identity)."""

    root: Path
    base: dict[str, Any]
    _base_digest: str = ""
    _written_prompts: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._base_digest = _digest(self.base)

    @classmethod
    def of_run(cls, out_root: str | Path, identity: dict[str, Any]) -> SampleCache | None:
        """The cache a run of ``identity`` writing under ``out_root`` reads and appends to (None: turned off)."""
        root = cache_dir(out_root)
        return None if root is None else cls(root, sample_key_base(identity))

    def item_key(self, item: Any) -> str:
        """The key of ``item``'s samples under this run's settings (its id and the hash of its content)."""
        return _digest([self._base_digest, str(item.item_id), items_sha256([item])])

    def _shard(self, key: str) -> Path:
        return self.root / f"{key[:2]}.jsonl"

    def lookup(self, wanted: Iterable[tuple[Any, Iterable[int]]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(row, prompt_record)`` for each wanted (item, sample index) the cache holds, in the order asked; a
        sample whose stored line is torn, foreign or lacks its prompt record is simply not found."""
        wanted = [(item, tuple(idx), self.item_key(item)) for item, idx in wanted]
        shards: dict[Path, tuple[dict, dict]] = {}
        for item, idx, key in wanted:
            path = self._shard(key)
            if path not in shards:
                shards[path] = read_shard(path)
            rows, prompts = shards[path]
            for i in idx:
                row = rows.get((key, i))
                if row is None or str(row.get("item_id")) != str(item.item_id):
                    continue
                prompt = prompts.get(row.get("prompt_hash")) if row.get("prompt_hash") is not None else {}
                if prompt is None:
                    continue
                yield row, prompt

    def put(self, item: Any, row: dict[str, Any], prompt: dict[str, Any] | None) -> None:
        """Append one finished row (and its prompt record, the first time this process stores it in the shard).
        An OSError (a full disk, a read-only cache) is logged once per call and never stops the run."""
        key = self.item_key(item)
        path = self._shard(key)
        entry: dict[str, Any] = {"key": key, "sample_idx": row["sample_idx"], "row": row}
        phash = row.get("prompt_hash")
        if phash is not None and prompt is not None and (str(path), phash) not in self._written_prompts:
            entry["prompt"] = prompt
        line = (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            append_locked(path, line)
        except OSError as exc:
            log.warning("sample cache %s: not stored (%s)", path, exc)
            return
        if "prompt" in entry:
            self._written_prompts.add((str(path), phash))


def append_locked(path: Path, line: bytes) -> None:
    """Append ``line`` with one write under an exclusive ``flock``, after a newline when the file ends mid-line."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a writer killed mid-line: that line stays torn and is skipped on read
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


def read_shard(path: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[str, dict[str, Any]]]:
    """``{(item key, sample index): row}`` (the last whole line wins) and ``{prompt hash: record}`` of a shard."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    prompts: dict[str, dict[str, Any]] = {}
    try:
        fh = path.open("rb")
    except OSError:
        return rows, prompts
    with fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                continue  # a torn last line
            try:
                entry = json.loads(raw)
                key, idx, row = entry["key"], entry["sample_idx"], entry["row"]
                if not (isinstance(key, str) and isinstance(idx, int) and isinstance(row, dict)
                        and row.get("sample_idx") == idx):
                    continue
                check_measured(row, str(path))
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign line
            rows[(key, idx)] = row
            prompt = entry.get("prompt")
            if isinstance(prompt, dict) and row.get("prompt_hash") is not None:
                prompts[row["prompt_hash"]] = prompt
    return rows, prompts


def reused_row(row: dict[str, Any], run_id: str, fp: str) -> dict[str, Any]:
    """A stored row as a row of the run ``run_id``: ``cached_from`` names the run that generated it."""
    return {**row, "run_id": run_id, "fingerprint": fp, "cached_from": row.get("cached_from") or row["run_id"]}
