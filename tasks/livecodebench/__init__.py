"""LiveCodeBench code generation (``lcb_runner``): official prompts, extraction, grading and pass@k, with every
model-written program run in an isolated sandbox (the :mod:`sandbox` package).

* data: ``data.py`` (hub release files, ``task.path``, the bundled sample; the contest-date window) and
  ``problem.py`` (the typed record; private tests decoded by a pickle loader that refuses every global);
* prompts and extraction: ``prompts.py``; grading semantics: ``grader.py`` and ``values.py``; metrics:
  ``summary.py``; isolation: :mod:`sandbox` (``sandbox/isolation.py``: what each mode guarantees; ``sandbox/run.py``:
  one run; ``sandbox/driver.py``: what runs inside).

The task interface (tasks/protocol.py): ``load``, ``validate``, ``prompt``, ``score``, ``score_many``, ``summarize``.

Grading protocol (``task.protocol``): ``lcb_runner`` (default) runs each program as ``testing_util.run_test`` does
(its ``reliability_guard``, stdin/stdout mocks and 50000-digit integer limit; see ``sandbox/driver.py``), and
extracts the code from the whole output, thinking included, as lcb_runner does (:func:`answer_part`); ``strict`` runs
programs on real file descriptors without the guard, and grades only the text after ``</think>`` (nothing when the
thinking never closed). Rows record ``protocol``. Return values are compared in the harness on values rebuilt
from typed data (``values.py``). Every known difference from lcb_runner, with the case that shows it, is listed in
``conf/task/livecodebench.yaml`` (the CPU-time deadline, a program's own classes, the sandbox's limits...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox import modes
from tasks.base import Prompt, split_thinking
from tasks.livecodebench.data import load_problems, release_files, source_paths, window
from tasks.livecodebench.grader import OUTCOMES, PROTOCOLS, GradeSettings, Verdict, grade, grade_many
from tasks.livecodebench.problem import Problem
from tasks.livecodebench.prompts import build_prompt, extract_code, resolve_style
from tasks.source import cfg_get, source_of

PRIMARY_METRIC = "pass@1"

__all__ = ["OUTCOMES", "PROTOCOLS", "Problem", "answer_part", "item_terms", "load", "prompt", "protocol_name", "score",
           "score_many", "summarize", "validate"]
GRADING_PACKAGES = ("sandbox",)  # code outside the task that decides its verdicts (evals.code_identity hashes it)


def protocol_name(cfg: Any) -> str:
    """The grading protocol of this run (``task.protocol``), as rows and ``meta.json`` record it."""
    return GradeSettings.from_cfg(cfg).protocol if cfg is not None else PROTOCOLS[0]


def answer_part(completion: str, thinking: bool, *, cfg: Any = None) -> tuple[str, bool]:
    """``(text to extract code from, thinking_closed)``: lcb_runner extracts from the whole output; ``strict`` from
    the text after ``</think>`` (:func:`tasks.base.split_thinking`)."""
    return split_thinking(completion, thinking, whole=protocol_name(cfg) == "lcb_runner")


def load(cfg: Any) -> list[Problem]:
    """The problems of ``task.source`` inside ``task.start_date .. task.end_date``, the first ``task.limit``."""
    return load_problems(cfg)


def validate(cfg: Any) -> None:
    """Check every knob and the data source before any model is loaded; resolves (and probes) the sandbox, so the
    reduced-isolation warning, if any, comes first."""
    window(cfg)
    resolve_style(str(cfg_get(cfg, "prompt_style", "auto")), None)
    _ks(cfg)
    settings = GradeSettings.from_cfg(cfg)
    if source_of(cfg) == "hub":  # checked without the network: the files are fetched once, when the job loads them
        release_files(str(cfg_get(cfg, "release", "release_latest")))
        try:
            import huggingface_hub  # noqa: F401
        except ImportError as exc:
            raise ValueError("task.source=hub needs the huggingface_hub package") from exc
    else:
        source_paths(cfg)
    modes.resolve(settings.sandbox, settings.python)


def grading_setup(cfg: Any) -> dict[str, Any]:
    """What decides a verdict besides the code: the sandbox mode ``task.sandbox`` resolves to (``auto`` is never
    recorded) and the interpreter that runs the programs (its path, and the real file's size and mtime)."""
    import os

    settings = GradeSettings.from_cfg(cfg)
    iso = modes.resolve(settings.sandbox, settings.python)
    real = os.path.realpath(iso.python)
    st = os.stat(real)
    return {"sandbox": iso.mode, "python": iso.python, "interpreter": [real, st.st_size, st.st_mtime_ns]}


def prompt(item: Problem, model_cfg: Any, *, cfg: Any = None, tokenizer: Any = None) -> Prompt:
    """The official prompt for the model family (``task.prompt_style``)."""
    return build_prompt(item, str(cfg_get(cfg, "prompt_style", "auto")), cfg_get(model_cfg, "family"),
                        cfg_get(model_cfg, "system_prompt"))


def _row(code: str | None, verdict: Verdict, protocol: str) -> dict:
    return {"prediction": code, "answer": None, "correct": verdict.correct, "outcome": verdict.outcome,
            "tests_passed": verdict.tests_passed, "tests_total": verdict.tests_total,
            "failed_test": verdict.failed_test, "error": verdict.error, "exec_time_s": verdict.exec_time_s,
            "sandbox": verdict.sandbox, "protocol": protocol}


def score(item: Problem, completion: str, *, cfg: Any = None) -> dict:
    """Extract the last code block and grade it in the sandbox. ``prediction`` is the code (None when there is
    none), ``correct`` whether every test passed, ``outcome`` one of ``OUTCOMES``."""
    code = extract_code(completion)
    settings = GradeSettings.from_cfg(cfg)
    return _row(code, grade(item, code, settings), settings.protocol)


def score_many(pairs: Sequence[tuple[Problem, str]], *, cfg: Any = None) -> list[dict]:
    """``score`` for many ``(item, completion)`` pairs, graded ``task.exec_workers`` at a time."""
    codes = [extract_code(completion) for _, completion in pairs]
    settings = GradeSettings.from_cfg(cfg)
    verdicts = grade_many([(item, code) for (item, _), code in zip(pairs, codes)], settings)
    return [_row(code, verdict, settings.protocol) for code, verdict in zip(codes, verdicts)]


def _ks(cfg: Any) -> tuple[int, ...]:
    from tasks.livecodebench.summary import DEFAULT_KS

    ks = cfg_get(cfg, "pass_k", DEFAULT_KS)
    try:
        ks = tuple(int(k) for k in ks)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"task.pass_k: expected a list of integers, got {ks!r}") from exc
    if not ks or min(ks) < 1:
        raise ValueError(f"task.pass_k: every k must be >= 1, got {list(ks)}")
    return ks


def summarize(rows: Any, *, cfg: Any = None) -> Any:
    """pass@k for every supported k of ``task.pass_k`` and the share of each outcome, overall and by difficulty
    and platform (fractions in 0..1)."""
    from tasks.livecodebench.summary import summarize_rows

    return summarize_rows(rows, _ks(cfg))


def item_terms(rows: Any, *, cfg: Any = None) -> Any:
    """The metrics of :func:`summarize` as per-item sums (:mod:`tasks.terms`), for the bootstrap."""
    from tasks.livecodebench.summary import item_terms_rows

    return item_terms_rows(rows, _ks(cfg))
