"""The sample cache's database (evals/execute/sample_cache.py): concurrent writers and a ``kill -9`` lose nothing but
the sample in flight; a damaged, foreign or untrusted cache costs one warning and generation, never a crash; a lookup
reads only the run's keys; the folder is made absolute from ``out_root`` and used only when it is the user's."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evals.execute.sample_cache import DBNAME, DIRNAME, SampleCache
from evals.run import run as run_cfg
from tests.runner_utils import TINY, compose_cfg

BASE = {"format": "test", "model": {"name": "m"}}


@dataclass(frozen=True)
class Item:
    item_id: str
    text: str = "content"
    breakdown: dict = field(default_factory=dict)


def row(item_id: str, i: int, **extra) -> dict:
    return {"run_id": "r", "item_id": item_id, "sample_idx": i, "prompt_hash": None, "completion": "x" * 200,
            "correct": True, **extra}


def opened(root: Path, base: dict = BASE) -> SampleCache:
    cache = SampleCache.open(root, base)
    assert cache is not None
    return cache


def found(cache: SampleCache, items: list[Item], n: int) -> list[tuple[str, int]]:
    return [(r["item_id"], r["sample_idx"]) for _, r, _ in cache.lookup((it, range(n)) for it in items)]


def _writer(root: str, who: str, n: int, pipe=None) -> None:
    cache = SampleCache.open(Path(root), BASE)
    for i in range(n):
        cache.put(Item(who), row(who, i), None)
        if pipe is not None:
            os.write(pipe, f"{i}\n".encode())  # stored (committed) before it is said


def test_four_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), f"w{w}", 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    items = [Item(f"w{w}") for w in range(4)]
    assert sorted(found(opened(tmp_path), items, 40)) == sorted((f"w{w}", i) for w in range(4) for i in range(40))


def test_kill_9_mid_write_loses_only_the_sample_in_flight(tmp_path):
    """A writer killed while it stores (others writing beside it): every sample it said it stored is there, the
    database is whole, and later writes and reads work."""
    ctx = multiprocessing.get_context("fork")
    r, w = os.pipe()
    victim = ctx.Process(target=_writer, args=(str(tmp_path), "victim", 100000, w))
    others = [ctx.Process(target=_writer, args=(str(tmp_path), f"o{k}", 30)) for k in range(3)]
    victim.start()
    for p in others:
        p.start()
    os.close(w)
    said, buf = -1, b""
    while said < 60:
        buf += os.read(r, 4096)
        said = int(buf.rsplit(b"\n", 2)[-2] or -1) if buf.count(b"\n") else -1
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    for p in others:
        p.join(60)
    buf += os.read(r, 1 << 20)
    os.close(r)
    said = max(int(x) for x in buf.split())
    cache = opened(tmp_path)
    got = found(cache, [Item("victim")], said + 2)
    assert [i for _, i in got][: said + 1] == list(range(said + 1)) and len(got) <= said + 2
    assert len(found(cache, [Item(f"o{k}") for k in range(3)], 30)) == 90
    cache.put(Item("after"), row("after", 0), None)
    assert found(cache, [Item("after")], 1) == [("after", 0)]
    with sqlite3.connect(tmp_path / DBNAME) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_lookup_reads_only_the_runs_keys(tmp_path):
    """20,000 samples of other runs (about 30 MiB) cost a lookup of 40 samples neither memory nor time."""
    cache = opened(tmp_path)
    cache.conn.execute("BEGIN")
    cache.conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)",
                           ((f"{k:064x}", 0, str(k), json.dumps(row(str(k), 0, completion="y" * 1500)))
                            for k in range(20000)))
    cache.conn.execute("COMMIT")
    mine = [Item(f"mine{k}") for k in range(10)]
    for it in mine:
        for i in range(4):
            cache.put(it, row(it.item_id, i), None)
    assert os.path.getsize(tmp_path / DBNAME) + os.path.getsize(tmp_path / f"{DBNAME}-wal") > 30 << 20
    fresh = opened(tmp_path)
    tracemalloc.start()
    start = time.perf_counter()
    hits = found(fresh, mine, 4)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(hits) == 40 and elapsed < 0.5 and peak < 2 << 20, (elapsed, peak)


def test_a_damaged_or_foreign_database_costs_one_warning(tmp_path, caplog):
    for content in (b"not a database at all" * 100, None):
        root = tmp_path / ("garbage" if content else "foreign")
        root.mkdir(mode=0o700)
        if content:
            (root / DBNAME).write_bytes(content)
        else:
            with sqlite3.connect(root / DBNAME) as conn:
                conn.execute("CREATE TABLE notes (x)")
        os.chmod(root / DBNAME, 0o600)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="evals.execute.sample_cache"):
            assert SampleCache.open(root, BASE) is None
        assert len(caplog.records) == 1 and str(root / DBNAME) in caplog.records[0].getMessage()
        assert "\n" not in caplog.records[0].getMessage()
        if content is None:  # another program's database is left as it was (not switched to WAL)
            with sqlite3.connect(root / DBNAME) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_row_nested_too_deep_or_cut_is_not_found(tmp_path):
    cache = opened(tmp_path)
    cache.put(Item("a"), row("a", 0), None)
    cache.put(Item("a"), row("a", 1), None)
    cache.put(Item("a"), row("a", 2), None)
    key = cache.item_key(Item("a"))
    cache.conn.execute("UPDATE samples SET row = ? WHERE key = ? AND sample_idx = 0", ("[" * 100000, key))
    cache.conn.execute("UPDATE samples SET row = ? WHERE key = ? AND sample_idx = 1", ('{"item_id": "a", "sam', key))
    assert found(cache, [Item("a")], 3) == [("a", 2)]


@pytest.mark.parametrize("plant", ["group_writable", "link", "other_owner", "wal_link"])
def test_an_untrusted_folder_or_file_is_not_used(tmp_path, caplog, plant):
    root = tmp_path / DIRNAME
    if plant == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "real")
    else:
        root.mkdir(mode=0o700)
    if plant == "group_writable":
        os.chmod(root, 0o770)
    elif plant == "other_owner":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(root, 4321, 4321)
    elif plant == "wal_link":
        (root / f"{DBNAME}-wal").symlink_to(tmp_path / "victim")
    with caplog.at_level(logging.WARNING, logger="evals.execute.sample_cache"):
        assert SampleCache.open(root, BASE) is None
    assert len(caplog.records) == 1 and "not used" in caplog.records[0].getMessage()
    assert not (tmp_path / "victim").exists() and not (tmp_path / "real" / DBNAME).exists()


def test_the_cache_is_made_private(tmp_path):
    os.chmod(tmp_path, 0o755)  # as a fresh `mktemp -d` clone
    opened(tmp_path / "out" / DIRNAME).put(Item("a"), row("a", 0), None)
    root = tmp_path / "out" / DIRNAME
    assert oct(os.stat(root).st_mode & 0o777) == oct(0o700)
    for name in (DBNAME, f"{DBNAME}-wal", f"{DBNAME}-shm"):
        if (root / name).exists():
            assert os.stat(root / name).st_mode & 0o077 == 0, name


def test_a_run_elsewhere_uses_the_cache_under_out_root_made_absolute(tmp_path, monkeypatch):
    """``hydra.run.dir`` elsewhere and the command started in a third folder: the cache is ``<out_root>/.sample_cache``
    resolved once, recorded in ``meta.json``; a damaged database there costs one warning, and the run completes."""
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    cfg = compose_cfg([*TINY, "task=needle", "task.context_tokens=256", "task.n_items=2", "task.limit=1",
                       "out_root=../out"])
    run_dir = run_cfg(cfg, tmp_path / "elsewhere")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["sample_cache"] == str(tmp_path / "out" / DIRNAME) and (tmp_path / "out" / DIRNAME / DBNAME).is_file()
    assert not (tmp_path / "cwd" / "results").exists()
    (tmp_path / "out" / DIRNAME / DBNAME).write_bytes(b"garbage" * 1000)
    for name in (f"{DBNAME}-wal", f"{DBNAME}-shm"):
        (tmp_path / "out" / DIRNAME / name).unlink(missing_ok=True)
    again = run_cfg(cfg, tmp_path / "again")
    assert json.loads((again / "meta.json").read_text())["status"] == "complete"
