"""The identities of the code that generated a row and of the code that graded it.

Each identity is a hash of a short dict of named parts, listed in one function each (:func:`generation_parts`,
:func:`grading_parts`), so that a new part (a backend's name, another package) is one line.

* **Generation** (``generation_id``): the source files that decide tokens: the compression core
  (``snapstream_core/``), the backends and their prompt records (``evals/execute/backends/``), model loading and
  conversion (``evals/config/models.py``, ``evals/config/embedded.py``), prompt encoding (``evals/config/encode.py``),
  the shared prompt helpers (``tasks/base.py``) and the task's prompt building (the files that define its ``prompt``
  and ``followup`` and, in a package, its ``prompts.py``); the data files the task reads to build prompts (its
  ``PROMPT_FILES``: needle's haystack and word lists, LongBench-v2's official templates), by content; the versions
  of the packages that decide tokens (:data:`GENERATION_PACKAGES`); and the backend's own identity (its name;
  ``backend=vllm``: the worker's vllm and torch versions and the worker file's hash). The git commit, when there
  is one, is recorded beside it (``generation_commit``) but is not part of it: a commit that changes none of these
  generates the same tokens. The model's own files (weights, tokenizer, chat template, configs) are the run
  identity's ``model.weights`` (:func:`evals.config.models.weights_identity`), hashed by content for the embedded
  and local models.
* **Grading** (``grading_id``): every source file of the task (its module, or all of its package), of the packages it
  names in ``GRADING_PACKAGES`` (LiveCodeBench: ``sandbox/``), the task interface (``tasks/protocol.py``,
  ``tasks/base.py``), what the task says decides a verdict besides its code (the optional hook ``grading_setup(cfg)``:
  LiveCodeBench's resolved sandbox mode and interpreter), the Python version and the versions of the packages that
  decide verdicts (:data:`GRADING_DISTRIBUTIONS`: math-verify and latex2sympy2_extended for AIME, lm-eval's tasks...).

A row of the sample cache or of a resumed run directory is reused only under this process's generation identity,
and re-graded when its grading identity differs (:mod:`evals.execute.loop`). The source hashes are computed once per
process and task (a few hundred KiB read), the prompt files at every call (about a millisecond); the grading setup
once per run.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from evals.record.rundir import git_commit
from tasks.base import bundled_path
from tasks.protocol import hook

REPO = Path(__file__).resolve().parents[2]
GENERATION_SOURCES = ("snapstream_core", "evals/execute/backends", "evals/config/models.py",
                      "evals/config/embedded.py", "evals/config/encode.py", "tasks/base.py")
GRADING_SOURCES = ("tasks/protocol.py", "tasks/base.py")
# distributions whose code turns a prompt into tokens: the model and its kernels, the tokenizer, the chat template's
# renderer, the weight reader; absent ones are recorded as null
GENERATION_PACKAGES = ("torch", "transformers", "tokenizers", "jinja2", "safetensors", "sentencepiece", "tiktoken",
                       "numpy")
# distributions whose code turns a completion into a verdict: AIME's math-verify (with latex2sympy2_extended, sympy
# and its ANTLR runtime), lm-eval's filters and metrics, numpy (LiveCodeBench's output comparison); the same list for
# every task: a version change re-grades (cheap), it never regenerates
GRADING_DISTRIBUTIONS = ("math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime", "lm_eval",
                         "numpy")


def _python_files(entry: Path) -> list[Path]:
    return sorted(entry.rglob("*.py")) if entry.is_dir() else [entry] if entry.is_file() else []


def sources_sha256(paths: list[Path]) -> str:
    """sha256 over the files' paths (relative to the repository) and contents, in sorted order."""
    h = hashlib.sha256()
    for path in sorted(set(paths)):
        name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _task_files(task: Any) -> list[Path]:
    """Every source file of the task: its package's files, or its module's, and those of the packages it names in
    ``GRADING_PACKAGES``."""
    path = Path(inspect.getsourcefile(task) or "")
    own = _python_files(path.parent) if path.name == "__init__.py" else [path]
    return own + [f for entry in hook(task, "GRADING_PACKAGES") or () for f in _python_files(REPO / entry)]


def _prompt_files(task: Any) -> list[Path]:
    """The files that build the task's prompts: where ``prompt`` and ``followup`` are defined, and ``prompts.py``
    beside a package's ``__init__.py``."""
    files = []
    for name in ("prompt", "followup"):
        fn = hook(task, name) if name != "prompt" else task.prompt
        if fn is not None:
            files.append(Path(inspect.getsourcefile(fn) or ""))
    module = Path(inspect.getsourcefile(task) or "")
    if module.name == "__init__.py" and (module.parent / "prompts.py").is_file():
        files.append(module.parent / "prompts.py")
    return [f for f in files if f.is_file()]


@functools.lru_cache(maxsize=64)
def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """The installed version of each distribution (None when absent)."""
    return {p: _version(p) for p in packages}


def prompt_data(task: Any) -> dict[str, str]:
    """``{name: sha256}`` of the data files ``task`` reads to build prompts (its ``PROMPT_FILES`` hook, names under
    ``tasks/data`` or ``$SNAPSTREAM_TASK_DATA``), by content; ``{}`` for a task whose items carry everything.
    Read at every call (a few hundred KiB, about a millisecond): an edit is seen even within one process."""
    out = {}
    for name in hook(task, "PROMPT_FILES") or ():
        path = bundled_path(name)
        try:
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise ValueError(f"task: the prompt file {path} cannot be read ({exc.strerror or exc})") from None
    return out


@functools.lru_cache(maxsize=16)
def _generation_sources(task: Any) -> str:
    files = [f for entry in GENERATION_SOURCES for f in _python_files(REPO / entry)] + _prompt_files(task)
    return sources_sha256(files)


def generation_parts(task: Any, backend: str = "") -> dict[str, Any]:
    """Everything the generation identity of rows of ``task`` generated by ``backend`` holds, by name (see the module
    docstring); ``backend``: its :meth:`~evals.execute.backends.base.Backend.code_identity` as JSON."""
    return {"sources": _generation_sources(task), "prompt_files": prompt_data(task),
            "packages": versions(GENERATION_PACKAGES), "backend": backend}


def generation_id(task: Any, backend: str = "") -> str:
    """The generation identity of rows of ``task`` generated by ``backend`` (16 hex digits); the source hash is
    computed once per process and task, the prompt files read at every call."""
    blob = json.dumps(generation_parts(task, backend), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _grading_sources(task: Any) -> str:
    return sources_sha256(_task_files(task) + [REPO / f for f in GRADING_SOURCES])


def grading_parts(task: Any, setup: dict[str, Any]) -> dict[str, Any]:
    """Everything the grading identity of ``task`` under ``setup`` (:func:`grading_setup`) holds, by name."""
    return {"sources": _grading_sources(task), "setup": setup, "python": platform.python_version(),
            "packages": versions(GRADING_DISTRIBUTIONS)}


def grading_setup(task: Any, task_cfg: Any) -> dict[str, Any]:
    """What decides the task's verdicts besides its code (the task's ``grading_setup`` hook; ``{}`` without it)."""
    setup = hook(task, "grading_setup")
    return dict(setup(task_cfg)) if setup is not None else {}


def grading_id(task: Any, setup: dict[str, Any]) -> str:
    """The grading identity (16 hex digits) of ``task`` under ``setup`` (:func:`grading_setup`)."""
    blob = json.dumps(grading_parts(task, setup), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """The harness's git commit (None outside a git checkout), read once per process."""
    return git_commit()
