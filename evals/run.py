"""``python -m evals.run [-m] key=value ...``: the Hydra entry point (thin: see :func:`evals.runner.run`)."""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from evals.cli import UserError, precheck
from evals.conf_store import register_methods

log = logging.getLogger("evals.run")
EXPLICIT_DIR = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
USER_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.ELOOP)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from evals.runner import run

    hc = HydraConfig.get()
    explicit = any(o.split("=", 1)[0].lstrip("+~") in EXPLICIT_DIR for o in hc.overrides.hydra)
    try:
        # An explicit hydra.run.dir / hydra.sweep.* is the run directory; by default the runner adds fp-<fingerprint>.
        run(cfg, Path(hc.runtime.output_dir) if explicit else None)
    except (ValueError, UserError) as exc:
        from evals.rundir import remove_if_empty

        remove_if_empty(Path(hc.runtime.output_dir))  # Hydra's folder, if the run never started
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # out of space, read-only, permission: the path and the reason, not a traceback
        if exc.errno not in USER_ERRNOS:
            raise
        from evals.rundir import os_error_line

        print(f"error: {os_error_line(exc, hc.runtime.output_dir)}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    register_methods()  # before Hydra composes: every method of snapstream_core.methods.METHODS is an option
    precheck(sys.argv[1:])
    main()
