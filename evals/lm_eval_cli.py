"""``python -m evals.lm_eval_cli [run] --model snapstream ...``: lm-eval's own command line, with ``snapstream``
registered.

lm-eval 0.4.13 looks ``--model`` up in its registry, which holds its built-in models and whatever classes were
decorated with ``@register_model`` in modules already imported; it reads no entry points, and ``--include_path``
only adds task YAMLs. So this wrapper imports :mod:`evals.lm_eval_model` and then hands the arguments, unchanged, to
lm-eval's console entry point (``lm_eval.__main__.cli_evaluate``): every lm-eval option works as documented.
"""

from __future__ import annotations

import sys

FLAGS = ("--model", "--model_args", "--tasks", "--include_path")


def _flags(argv: list[str]) -> dict[str, str]:
    """The values of :data:`FLAGS` in ``argv`` (``--flag value`` or ``--flag=value``)."""
    values = {}
    for i, arg in enumerate(argv):
        for flag in FLAGS:
            if arg == flag and i + 1 < len(argv):
                values[flag] = argv[i + 1]
            elif arg.startswith(flag + "="):
                values[flag] = arg.split("=", 1)[1]
    return values


def _model_args(argv: list[str]) -> str | None:
    """The ``--model_args`` value of a ``--model snapstream`` command line (None for other models)."""
    values = _flags(argv)
    return values.get("--model_args") if values.get("--model") == "snapstream" else None


def precheck(argv: list[str]) -> None:
    """Exit with one line (code 2) on a bad compression knob or a task that is not ``generate_until`` (a
    log-likelihood task, refused by the model only after its weights load), before any weights load."""
    values = _flags(argv)
    if values.get("--model") != "snapstream":
        return
    try:
        raw = values.get("--model_args")
        if raw and not raw.lstrip().startswith("{"):  # JSON args: the model checks them when built
            from lm_eval.utils import simple_parse_args_string

            from evals.lm_eval_model import compression_from_model_args

            compression_from_model_args(simple_parse_args_string(raw))
        if values.get("--tasks"):
            _check_tasks(values["--tasks"], values.get("--include_path"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def _check_tasks(tasks: str, include_path: str | None) -> None:
    """Each ``--tasks`` name through the checks of ``task=lm_eval`` (:func:`tasks.lm_eval.harness.check_name`)."""
    from tasks.lm_eval.harness import check_name

    for name in (t.strip() for t in tasks.split(",") if t.strip()):
        if include_path:  # the user's folder first: indexing lm-eval's ~15k built-in YAMLs takes seconds
            try:
                check_name({"name": name, "include_path": include_path, "include_defaults": False})
                continue
            except ValueError as exc:
                if "unknown lm-eval task" not in str(exc):
                    raise
        check_name({"name": name, "include_path": include_path, "include_defaults": True})


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    import evals.lm_eval_model  # noqa: F401  (registers --model snapstream)

    precheck(sys.argv[1:])
    cli_evaluate()


if __name__ == "__main__":
    main()
