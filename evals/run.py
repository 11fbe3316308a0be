"""``python -m evals.run [-m] key=value ...``: the Hydra entry point (thin: :func:`evals.config.spec.check`, then
:func:`evals.execute.loop.run`).

Ctrl-C ends the run with one line (``interrupted: N rows kept; the same command resumes``) and exit code 130: the
rows already appended to ``samples.jsonl`` are kept, and the same command resumes after them.
"""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from evals.cli import UserError, precheck
from evals.config.conf_store import register_methods
from evals.config.spec import check
from evals.execute.loop import run as execute
from evals.progress import callback_overrides

log = logging.getLogger("evals.run")
EXPLICIT_DIR = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
USER_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.ELOOP)
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C


def rows_kept(base: Path) -> int:
    """Rows in the ``samples.jsonl`` (or a shard's ``samples.shard-K-of-N.jsonl``) under ``base`` (the run directory,
    or the readable folder above its ``fp-<fingerprint>/``) most recently written."""
    files = [base / "samples.jsonl", *base.glob("fp-*/samples.jsonl"), *base.glob("samples.shard-*-of-*.jsonl"),
             *base.glob("fp-*/samples.shard-*-of-*.jsonl")]  # a shard's own rows (docs/sharding.md)
    files = [f for f in files if f.is_file()]
    if not files:
        return 0
    newest = max(files, key=lambda f: f.stat().st_mtime)
    with open(newest, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def interrupted(base: Path | None) -> None:
    """The one line Ctrl-C prints, then exit 130."""
    kept = rows_kept(base) if base is not None else 0
    print(f"\ninterrupted: {kept} rows kept; the same command resumes", file=sys.stderr)
    sys.exit(INTERRUPTED)


def run(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Check a composed config and run it (:func:`evals.execute.loop.run`, which first pins this process to one of
    ``gpus``); returns the run directory."""
    return execute(check(cfg), run_dir)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> str | None:
    from evals.logonce import install

    install()  # after Hydra configured logging: every warning once per process
    hc = HydraConfig.get()
    explicit = any(o.split("=", 1)[0].lstrip("+~") in EXPLICIT_DIR for o in hc.overrides.hydra)
    base = Path(hc.runtime.output_dir) if explicit else Path(str(cfg.run_dir))
    try:
        # An explicit hydra.run.dir / hydra.sweep.* is the run directory; by default the runner adds fp-<fingerprint>.
        return str(run(cfg, Path(hc.runtime.output_dir) if explicit else None))  # the sweep's progress reads it
    except KeyboardInterrupt:
        interrupted(base)
    except (ValueError, UserError) as exc:
        from evals.record.rundir import remove_if_empty

        # Hydra's folder, if the run never started, and the folders above it up to out_root that this leaves empty
        remove_if_empty(Path(hc.runtime.output_dir), up_to=Path(str(cfg.out_root)))
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # out of space, read-only, permission: the path and the reason, not a traceback
        if exc.errno not in USER_ERRNOS:
            raise
        from evals.record.rundir import os_error_line

        print(f"error: {os_error_line(exc, hc.runtime.output_dir)}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    from evals.cpus import prepare

    prepare()  # thread counts and passive waiting, before torch loads
    try:
        try:
            register_methods()  # before Hydra composes: every method of snapstream_core.methods.METHODS is an option
        except ValueError as exc:  # a method's knob named like a row column
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        checked = precheck(sys.argv[1:])
        if any(a in ("-m", "--multirun") for a in sys.argv[1:]):  # the sweep's progress: its jobs and their work
            sys.argv += callback_overrides(checked.jobs, checked.specs) + checked.launcher
        main()
    except KeyboardInterrupt:  # before a job started (checking, composing), or between jobs of a sweep
        interrupted(None)
