"""Checks of the command line before Hydra runs anything: one clear line and exit code 2 for a bad override.

Every combination of a ``-m`` sweep is expanded (:func:`evals.config.overrides.expand`), composed and checked
(:func:`evals.config.spec.check`: no data read, no weights loaded, no network, no torch). Bad ones are listed, one
line each, and nothing runs. What passed (:class:`Checked`: the run specs, how many jobs) is returned to the entry
point, which hands it on to the sweep's progress (:mod:`evals.progress`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from evals.config.conf_store import register_methods
from evals.config.gpus import joblib_workers
from evals.config.overrides import CONF, UserError, check_nesting, expand, one_line, options, sweeper_params
from evals.config.spec import RunSpec, check
from evals.plan.workload import estimate
from evals.record.rundir import check_writable

__all__ = ["Checked", "UserError", "check_combination", "check_command", "check_nesting", "options", "precheck",
           "validate"]
MAX_LISTED = 20  # bad combinations printed (then a count)


@dataclass(frozen=True)
class Checked:
    """What checking a command line found: one line per bad combination, else the spec of every job."""

    bad: list[str] = field(default_factory=list)
    specs: list[RunSpec] = field(default_factory=list)  # in launch order; empty when any combination is bad
    jobs: int | None = None  # combinations checked (None: the command line was not checked)
    launcher: list[str] = field(default_factory=list)  # overrides the entry point adds (joblib: one worker per GPU)


def check_combination(overrides: list[str]) -> RunSpec:
    """Compose one job's config and run every check that needs no data and no weights; returns its spec."""
    return _check_combination(overrides)[0]


def _check_combination(overrides: list[str]) -> tuple[RunSpec, tuple[str, object]]:
    """:func:`check_combination`, and the launcher's target and ``n_jobs`` (for :func:`launcher_overrides`)."""
    try:
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except Exception as exc:  # hydra's ConfigCompositionException / MissingConfigException
        raise UserError(one_line(exc, overrides)) from None
    if cfg.hydra.job.get("chdir"):
        raise UserError("hydra.job.chdir: true is not supported: the run reads and writes relative paths (task.path, "
                        "backend.path, out_root, run_dir) from the folder it is started in; drop the override")
    try:
        out_dir = str(cfg.hydra.run.dir)  # where Hydra itself will write first (its log, the run's folder)
    except Exception:  # an interpolation that resolves only inside a running job
        out_dir = None
    launcher = cfg.hydra.get("launcher") or {}
    target, n_jobs = launcher.get("_target_", ""), launcher.get("n_jobs")
    with open_dict(cfg):
        del cfg["hydra"]  # its runtime interpolations resolve only inside a running job
    try:
        spec = check(cfg, offline=True)  # no network, no data: the job checks the hub once before it loads anything
        # out_root first: the default hydra.run.dir lies under it, and the user named out_root, not hydra.run.dir
        for field, path in (("out_root", cfg.get("out_root")), ("hydra.run.dir", out_dir)):
            if path:
                check_writable(Path(path), field)
    except ValueError as exc:
        raise UserError(one_line(exc)) from None
    return spec, (str(target), n_jobs)


def launcher_overrides(launcher: tuple[str, object], gpus: tuple[int, ...] | None) -> list[str]:
    """The overrides the entry point adds for ``gpus`` (joblib: one worker per GPU, :func:`joblib_workers`); raises
    ``UserError`` for a launcher that cannot keep one job per GPU."""
    try:
        workers = joblib_workers(*launcher, gpus)
    except ValueError as exc:
        raise UserError(one_line(exc)) from None
    return [] if workers is None else [f"hydra.launcher.n_jobs={workers}"]


def check_command(args: list[str]) -> Checked:
    """Check every combination of the command line ``args``."""
    multirun = any(a in ("-m", "--multirun") for a in args)
    register_methods()  # compression=<method> for every registered method, YAML file or not
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            given = [a for a in args if not a.startswith("-")]
            params = sweeper_params(given) if multirun else []
            combos = expand(params + given, multirun)  # later overrides win, as in BasicSweeper
            bad, checked, launcher = [], [], ("", None)
            for combo in combos:
                try:
                    spec, launcher = _check_combination(combo)
                    checked.append(spec)
                except UserError as exc:
                    swept = [o for o in combo if o not in given] if len(combos) > 1 else []
                    bad.append(f"{' '.join(swept)}: {exc}" if swept else str(exc))
            values = list(dict.fromkeys(s.gpus for s in checked))
            extra: list[str] = []
            if len(values) > 1:  # the slots are the machine's, not a job's
                shown = " and ".join("null" if v is None else str(list(v)) for v in values)
                bad.append(f"gpus: one value for the whole command line (the machine's GPUs), got {shown}")
            elif values and multirun:  # one launcher for the whole command line
                try:
                    extra = launcher_overrides(launcher, values[0])
                except UserError as exc:
                    bad.append(str(exc))
            return Checked(list(dict.fromkeys(bad)), [] if bad else checked, len(combos), extra)
    finally:
        GlobalHydra.instance().clear()


def validate(args: list[str]) -> list[str]:
    """One line per bad combination of the command line (empty: everything can run)."""
    return check_command(args).bad


def precheck(args: list[str]) -> Checked:
    """Exit with one line on stderr per bad combination if any job of the command line cannot run; else print the
    work it asks for (large command lines only) and return what was checked."""
    if any(a in ("--help", "-h", "--hydra-help", "--info") or a.startswith("--cfg") for a in args):
        return Checked()
    try:
        checked = check_command(args)
    except UserError as exc:
        checked = Checked([str(exc)])
    if checked.bad:
        for line in checked.bad[:MAX_LISTED]:
            print(f"error: {line}", file=sys.stderr)
        if len(checked.bad) > MAX_LISTED:
            print(f"error: ... and {len(checked.bad) - MAX_LISTED} more bad combinations", file=sys.stderr)
        sys.exit(2)
    line = estimate(checked.specs)
    if line:
        print(line, file=sys.stderr)
    return checked
