"""The sample cache: a finished sample is stored under its identity and reused by any run that needs the same sample.

A sample is a pure function of (model and weights, method and its effective knobs, the prompt, the sampler, the seed,
the item, the sample index, the code that generates it). Its key here is built from the run's identity
(:func:`evals.execute.identity.run_identity`) with what only *selects* items left out (``task.limit``, ``task.n_items``,
the hash of all items read), the task's resolved grading setup put in (LiveCodeBench: the sandbox mode ``auto`` resolved
to, never ``auto``), the generation identity (:mod:`evals.execute.code_identity`) and the item itself (its id and a hash
of its content). ``gen.n_samples`` is left out where sample ``i`` does not depend on it (greedy, or the engine's
counter-based noise keyed on (seed, item, sample, step)).

Storage: one SQLite database (``samples.sqlite``, write-ahead log, as lm-eval's own response cache is a SQLite
dictionary): a sample is one row of the table ``samples`` under its unique key (item key, sample index), a prompt
record one row of ``prompts``; each store is one transaction, so concurrent writers wait for each other and a writer
killed mid-write loses only the sample in flight. A lookup reads only the run's keys (the index): its
time and memory depend on the run, not on the size of the cache.

Place: on one host's filesystem only (WAL needs memory shared between the processes): a folder on a network
filesystem is replaced by a node-local one before the cache opens (:mod:`evals.execute.cache_place`).

Trust: the folder (``<out_root>/.sample_cache`` made absolute once per run, or ``$SNAPSTREAM_SAMPLE_CACHE``) must be
a folder, not a link, owned by this user and writable by nobody else, and so must the database and its ``-wal`` and
``-shm`` files; else the cache is not used (one warning). A file there that is not this cache's database (foreign,
damaged, cut) costs one warning and the run generates what it needs; it is never a crash. A stored row that does not
parse (a damaged or hand-made row, a line nested past Python's recursion limit) is not found.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.config.private_files import private_folder, untrusted
from evals.execute.identity import SAMPLERS, items_sha256
from evals.record.rows import check_measured

log = logging.getLogger(__name__)

ENV = "SNAPSTREAM_SAMPLE_CACHE"
DIRNAME = ".sample_cache"
DBNAME = "samples.sqlite"
SELECTION_KEYS = ("limit", "n_items", "data_sha256", "items_read")  # choose which items are read, not what they are
FORMAT = 2
APPLICATION_ID = 0x534E5343  # "SNSC", in the database header: a file of another program is not read
OFF = ("off", "0", "false", "no")  # values of $SNAPSTREAM_SAMPLE_CACHE that turn the cache off
BUSY_TIMEOUT_S = 60.0
# rowid tables with a unique index (rows hold whole completions: too large for WITHOUT ROWID's B-tree)
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS samples (key TEXT NOT NULL, sample_idx INTEGER NOT NULL, item_id TEXT NOT NULL, "
    "row TEXT NOT NULL, UNIQUE (key, sample_idx))",
    "CREATE TABLE IF NOT EXISTS prompts (hash TEXT NOT NULL UNIQUE, record TEXT NOT NULL)",
)


def cache_dir(out_root: str | Path) -> Path | None:
    """The cache folder, absolute: ``$SNAPSTREAM_SAMPLE_CACHE`` when set (and not empty), else
    ``<out_root>/.sample_cache``; None when the variable turns the cache off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    return Path(os.path.abspath(value or Path(out_root) / DIRNAME))


def sample_key_base(identity: dict[str, Any], generation: str, setup: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The part of a sample's key that every sample of the run shares (see the module docstring); ``setup``: the
    task's resolved grading setup (:func:`evals.execute.code_identity.grading_setup`), which replaces the task's
    knobs of
    the same name."""
    gen = dict(identity["gen"])
    if gen.get("sampler") != SAMPLERS["generate"]:  # sample i drawn from its own noise, or greedy
        gen.pop("n_samples", None)
    task = {k: v for k, v in identity["task"].items() if k not in SELECTION_KEYS}
    task.update({k: v for k, v in (setup or {}).items() if k in task})
    return {"format": FORMAT, "model": identity["model"], "compression": identity["compression"], "gen": gen,
            "task": task, "backend": identity["backend"], "harness": identity.get("harness"),
            "generation_id": generation}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _check_place(root: Path) -> str | None:
    """Make ``root`` (mode 0700) and the database file (0600) if missing; why they cannot be trusted, or None."""
    try:
        why = private_folder(root)
        if why:
            return f"the folder {root} {why}"
        db = root / DBNAME
        try:
            os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            pass
        for path in (db, root / f"{DBNAME}-wal", root / f"{DBNAME}-shm"):
            if os.path.lexists(path) and (why := untrusted(path, os.lstat(path), "file")):
                return f"{path} {why}"
    except OSError as exc:
        return f"{root}: {exc.strerror or exc}"
    return None


def _header(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(application_id, user_version, number of schema entries) of an open database."""
    app, fmt = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("application_id", "user_version"))
    return app, fmt, conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]


def _check_header(app: int, fmt: int, tables: int) -> bool:
    """Whether the database is new and empty (True) or this cache's (False); raises ``ValueError`` otherwise."""
    if (app, fmt) == (0, 0) and tables == 0:
        return True
    if (app, fmt) != (APPLICATION_ID, FORMAT):
        raise ValueError(f"not a sample cache of this format (application_id {app}, user_version {fmt})")
    return False


def _connect(db: Path) -> sqlite3.Connection:
    """Open the cache's database (raises ``sqlite3.Error`` for a damaged one, ``ValueError`` for a foreign one,
    which is refused before anything is written to it)."""
    conn = sqlite3.connect(db, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    try:
        _check_header(*_header(conn))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: a killed process loses no committed transaction
        conn.execute("BEGIN IMMEDIATE")  # again under the write lock: two jobs may have found it new
        if _check_header(*_header(conn)):
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={FORMAT}")
        for statement in SCHEMA:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn


@dataclass
class SampleCache:
    """Lookups and stores for one run (``base``: :func:`sample_key_base`) in the database under ``root``."""

    root: Path
    base: dict[str, Any]
    conn: sqlite3.Connection | None = None
    _base_digest: str = ""

    def __post_init__(self) -> None:
        self._base_digest = _digest(self.base)

    @classmethod
    def open(cls, root: Path, base: dict[str, Any]) -> SampleCache | None:
        """The cache in ``root`` for a run of key base ``base``; None (after one warning) when the folder or the
        database cannot be trusted or is not this cache's."""
        why = _check_place(root)
        if why:
            log.warning("sample cache not used: %s (it must be a folder owned by you and writable by nobody else; "
                        "sample_cache=false turns it off)", why)
            return None
        try:
            conn = _connect(root / DBNAME)
        except (sqlite3.Error, ValueError) as exc:
            log.warning("sample cache %s not used: %s; samples are generated (move the file away to start a new "
                        "cache)", root / DBNAME, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            return None
        return cls(root, base, conn)

    def item_key(self, item: Any) -> str:
        """The key of ``item``'s samples under this run's settings (its id and the hash of its content)."""
        return _digest([self._base_digest, str(item.item_id), items_sha256([item])])

    def _broken(self, exc: Exception) -> None:
        log.warning("sample cache %s: %s; not used for the rest of this run", self.root / DBNAME,
                    str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        self.close()

    def lookup(self, wanted: Iterable[tuple[Any, Iterable[int]]]
               ) -> Iterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
        """``(item, row, prompt_record)`` for each wanted (item, sample index) the cache holds, in the order asked;
        a stored row that does not parse, is of another item or lacks its prompt record is not found."""
        for item, indices in wanted:
            if self.conn is None:
                return
            key = self.item_key(item)
            try:
                stored = dict(self.conn.execute("SELECT sample_idx, row FROM samples WHERE key = ?", (key,)))
                for i in indices:
                    row = _parse_row(stored.get(i), i, str(item.item_id))
                    if row is None:
                        continue
                    prompt = self._prompt(row.get("prompt_hash"))
                    if prompt is not None:
                        yield item, row, prompt
            except sqlite3.Error as exc:
                self._broken(exc)
                return

    def _prompt(self, phash: Any) -> dict[str, Any] | None:
        if phash is None:
            return {}
        found = self.conn.execute("SELECT record FROM prompts WHERE hash = ?", (str(phash),)).fetchone()
        record = _parse(found[0]) if found else None
        return record if isinstance(record, dict) else None

    def put(self, item: Any, row: dict[str, Any], prompt: dict[str, Any] | None) -> None:
        """Store one finished row (and its prompt record) in one transaction. A failure (a full disk, a damaged
        database) is logged once and never stops the run."""
        if self.conn is None:
            return
        entry = json.dumps(row, ensure_ascii=False, default=str)
        phash = row.get("prompt_hash")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?)",
                                  (self.item_key(item), int(row["sample_idx"]), str(item.item_id), entry))
                if phash is not None and prompt is not None:
                    self.conn.execute("INSERT OR IGNORE INTO prompts VALUES (?, ?)",
                                      (str(phash), json.dumps(prompt, ensure_ascii=False, default=str)))
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._broken(exc)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _parse(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _parse_row(text: Any, sample_idx: int, item_id: str) -> dict[str, Any] | None:
    """A stored row, or None when it does not parse or is not the row of (``item_id``, ``sample_idx``)."""
    row = _parse(text)
    if not isinstance(row, dict) or row.get("sample_idx") != sample_idx or str(row.get("item_id")) != item_id:
        return None
    try:
        check_measured(row, "sample cache")
    except (ValueError, TypeError):
        return None
    return row


def reused_row(row: dict[str, Any], run_id: str, fp: str) -> dict[str, Any]:
    """A stored row as a row of the run ``run_id``: ``cached_from`` names the run that generated it."""
    return {**row, "run_id": run_id, "fingerprint": fp, "cached_from": row.get("cached_from") or row["run_id"]}
