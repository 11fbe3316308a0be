"""A run directory: addressable by its config, resumable, and never looking complete before it is."""

from __future__ import annotations

import fcntl
import logging
import os
import platform
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from evals.record.files import kind

SAMPLES = "samples.jsonl"
SAMPLES_CSV = "samples.csv"
SUMMARY = "summary.csv"
META = "meta.json"
LOCK = ".lock"
RESULTS = "results.json"  # the headline (evals.report.run_headline)
RESULT_FILES = (SAMPLES, SAMPLES_CSV, SUMMARY, META, RESULTS, "resolved_config.yaml", "prompts.jsonl.gz")
log = logging.getLogger(__name__)
PACKAGES = ("torch", "transformers", "hydra-core", "datasets", "pandas", "math-verify", "lm_eval", "snapstream-harness")


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``run_dir/.lock`` for a run's life: one writer per run directory.

    A second job for the same run (e.g. ``compression=none`` swept over budgets under a parallel launcher) blocks
    here until the first ends, then resumes with nothing to go. The kernel drops the lock when a process dies
    (``kill -9`` included), so a stale lock file never blocks.
    """
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another job is writing this run; waiting for it to finish", run_dir)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def refuse_symlinks(run_dir: Path, extra: tuple[str, ...] = ()) -> None:
    """A run never writes through a symbolic link, and reads and writes only regular files: a linked
    ``samples.jsonl`` would have the run append to (or cut the torn tail of) whatever it points to; a FIFO, socket or
    device there would block the run forever on its first read. Refused before anything is opened (``ValueError``
    naming the path; ``os.lstat`` only: nothing at the path is opened or followed)."""
    names = (*RESULT_FILES, *(f".{n}.tmp" for n in RESULT_FILES), LOCK, ".hydra", "plots", *HYDRA_FILES, *extra)
    folders = (".hydra", "plots")
    for name in names:
        path = run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise ValueError(f"hydra.run.dir: {path} is a symbolic link; a run never writes through one "
                             "(remove it or choose another hydra.run.dir)")
        if not (stat.S_ISDIR(mode) if name in folders else stat.S_ISREG(mode)):
            raise ValueError(f"hydra.run.dir: {path} is {kind(mode)}, not a regular "
                             f"{'folder' if name in folders else 'file'}; a run reads and writes only those "
                             "(remove it or choose another hydra.run.dir)")


def write_hydra_files(run_dir: Path, config_yaml: str) -> None:
    """Hydra's ``.hydra/{config,hydra,overrides}.yaml`` for the job (``config_yaml``: the composed config as YAML),
    written by the run itself once it is accepted (``hydra.output_subdir`` is null: a refused re-run must not replace
    a finished run's record); a no-op outside ``@hydra.main``."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    folder = run_dir / ".hydra"
    folder.mkdir(exist_ok=True)
    write_atomic(folder / "config.yaml", config_yaml)
    write_atomic(folder / "hydra.yaml", OmegaConf.to_yaml({"hydra": hc}))
    write_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(list(hc.overrides.task)))


def check_writable(path: Path, field: str) -> None:
    """Refuse, before anything starts, a results folder whose nearest existing folder cannot take files: a
    read-only file system, one with no space left, or one this user may not write (one line naming the path)."""
    path = Path(path).absolute()
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    if not existing.is_dir():
        raise ValueError(f"{field}: {existing} is not a folder")
    try:
        st = os.statvfs(existing)
    except OSError as exc:
        raise ValueError(f"{field}: {os_error_line(exc)}") from None
    if st.f_flag & os.ST_RDONLY:
        raise ValueError(f"{field}: {existing}: Read-only file system")
    if st.f_blocks == 0:  # /proc, /sys: a virtual file system reports no blocks at all, not a full disk
        raise ValueError(f"{field}: {existing}: not a folder that can hold files (a virtual file system)")
    if st.f_bavail == 0 and os.geteuid() != 0 or st.f_bfree == 0:
        raise ValueError(f"{field}: {existing}: No space left on device")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{field}: {existing}: Permission denied")


def os_error_line(exc: OSError, where: object = "(results)") -> str:
    """An out-of-space, read-only or permission error as one line naming the path (``where`` when the error
    names none)."""
    where = exc.filename if exc.filename is not None else where
    return f"{where}: {exc.strerror or type(exc).__name__}"


def check_resumable(run_dir: Path, fp: str, identity: dict[str, Any]) -> None:
    """Refuse to mix rows of different configurations in one directory: rows whose configuration cannot be known
    (a ``samples.jsonl`` without ``meta.json``, or with one that is not a JSON object) or differs from this run's
    are never resumed (one line; ``overwrite=true`` starts afresh). The rows' own fingerprints are checked as they
    are read (:func:`evals.record.rows.read_rows`)."""
    meta_path = run_dir / META
    if not (run_dir / SAMPLES).exists():
        return
    fresh = "pass overwrite=true to start afresh or choose another hydra.run.dir"
    if not meta_path.is_file():
        if (run_dir / SAMPLES).stat().st_size == 0:
            return  # an empty file: nothing to resume, nothing to mix
        raise ValueError(f"hydra.run.dir: {run_dir / SAMPLES} has no {META} beside it, so its rows' configuration "
                         f"is unknown and they are not resumed; {fresh}")
    old = read_meta(meta_path)
    if old is None:
        raise ValueError(f"hydra.run.dir: {meta_path} is not a JSON object (damaged or cut), so the rows beside it "
                         f"are not resumed; {fresh}")
    if old.get("fingerprint") == fp:
        return
    old_id = old.get("identity", {})
    diff = sorted(_diff_keys(old_id, identity)) or ["(unknown)"]
    raise ValueError(
        f"hydra.run.dir: {run_dir} holds results of another configuration (differs in: {', '.join(diff[:5])}); "
        "pass overwrite=true to start afresh or choose another hydra.run.dir"
    )


def read_meta(path: Path) -> dict[str, Any] | None:
    """A run's ``meta.json`` as a dict; None when it cannot be read or is not a JSON object."""
    from evals.record.files import read_json

    try:
        meta = read_json(path)  # never waits on a FIFO, never recurses without bound
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in set(a) | set(b):
            out += _diff_keys(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def clear_results(run_dir: Path) -> None:
    """``overwrite=true``: remove the result files, the headline ``results.json`` and shards' rows included, before
    anything else is written (a re-run killed early never leaves the old scores beside no rows); ``.hydra/`` stays."""
    for name in RESULT_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for pattern in ("samples.shard-*-of-*.jsonl", "prompts.shard-*-of-*.jsonl.gz"):  # evals/record/shard_files.py
        for path in run_dir.glob(pattern):
            path.unlink(missing_ok=True)
    shutil.rmtree(run_dir / "plots", ignore_errors=True)


HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")
OWN_FILES = (*HYDRA_FILES, LOCK)  # what a run that never started may have written


def _process_start() -> float:
    """When this process started (epoch seconds): boot time + field 22 of ``/proc/self/stat``; else now."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def remove_if_empty(run_dir: Path, up_to: Path | None = None) -> None:
    """After a failure before any work: remove what this run wrote there and then the folder, only if that leaves
    it empty (``rmdir``, never a recursive delete); nothing at all where a run's results lie. This run's files are
    ``.hydra/*.yaml`` and the run's ``.lock`` written since this process started, and a ``*.log`` whose first line
    is a Hydra log record stamped since then (Hydra appends to an existing log, so a user's older log starts with an
    older stamp and is kept, with the folder). ``up_to`` (``out_root``): the folders between it and ``run_dir`` that
    this leaves empty go too (``<model>/<task tag>/<method tag>/``), never ``up_to`` itself."""
    if not run_dir.is_dir() or any((run_dir / name).exists() for name in RESULT_FILES):
        return  # a run's results are there (a finished run beside a refused re-run): touch nothing
    since = _process_start() - 2.0
    for path in [run_dir / name for name in OWN_FILES] + sorted(run_dir.glob("*.log")):
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_mtime < since:
                continue
            if path.suffix == ".log" and not _log_started_since(path, since):
                continue
            path.unlink()
        except OSError:
            continue
    above = [] if up_to is None else [p for p in run_dir.absolute().parents if up_to.absolute() in p.parents]
    for folder in (run_dir / ".hydra", run_dir, *above):
        try:
            folder.rmdir()  # only if empty
        except OSError:
            if folder != run_dir / ".hydra":
                break


def _log_started_since(path: Path, since: float) -> bool:
    """Whether a log file is empty or begins with a Hydra record ``[YYYY-MM-DD HH:MM:SS,mmm]...`` (local time)
    stamped at or after ``since``."""
    with path.open("rb") as fh:
        head = fh.read(64)
    if not head:
        return True
    try:
        stamp = datetime.strptime(head[1:20].decode("ascii"), "%Y-%m-%d %H:%M:%S")
    except (UnicodeDecodeError, ValueError):
        return False
    return head[:1] == b"[" and stamp.timestamp() >= int(since)


def write_atomic(path: Path, text: str) -> None:
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a fresh temporary file beside ``path`` (never through a link), then rename it over."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a stale one, or a link planted there: removed, never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # a full disk: name the file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def versions() -> dict[str, str | None]:
    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        res = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def git_commit() -> str | None:
    out = _git("rev-parse", "HEAD")
    return out.strip() or None if out else None


def git_dirty() -> bool | None:
    """Whether the harness checkout has uncommitted changes to tracked files (None outside a git checkout)."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return None if out is None else bool(out.strip())


def device_info(torch_info: bool = True) -> dict[str, Any]:
    """Platform and CPU count; with ``torch_info`` (a run that loads weights) torch's threads and the GPU too (a
    replay, which imports no torch, leaves them out)."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if not torch_info:
        return info
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
