"""``docs/architecture.md`` matches the tree: every repository path and every module it names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("bench", "evals", "sandbox", "snapstream_core", "tasks", "tests")
TOP = (*PACKAGES, "conf", "docs")
# A path starts at a top-level folder; it stops at a placeholder (``tasks/<name>/``), a space or ``::``.
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*)" % "|".join(TOP))
# A dotted name starts with a package: ``evals.config.spec.check``, ``bench.cpu_decode.KERNELS``.
MODULE = re.compile(r"(?<![\w./-])((?:%s)(?:\.\w+)+)" % "|".join(PACKAGES))


def _path_exists(token: str) -> bool:
    """``token`` is a file or folder, a Hydra config name (``conf/experiment/smoke``: its ``.yaml``), or
    ``<module file>.<attribute>`` (``tests/runner_utils.compose_cfg``)."""
    token = token.rstrip(".,;:")
    if (REPO / token).exists() or (REPO / f"{token}.yaml").is_file():
        return True
    head, _, last = token.rpartition("/")
    return "." in last and (REPO / head / (last.split(".")[0] + ".py")).is_file()


def _module_exists(token: str) -> bool:
    """Some prefix of at least two parts of ``token`` is a module file or package (the rest may be attributes)."""
    parts = token.split(".")
    for k in range(len(parts), 1, -1):
        base = REPO.joinpath(*parts[:k])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def missing(text: str) -> list[str]:
    """The paths and dotted module names in ``text`` that do not exist in the repository."""
    bad = [m.group(1) for m in PATH.finditer(text) if not _path_exists(m.group(1))]
    bad += [m.group(1) for m in MODULE.finditer(text) if not _module_exists(m.group(1))]
    return sorted(set(bad))


def test_every_path_and_module_in_the_architecture_page_exists():
    text = DOC.read_text(encoding="utf-8")
    assert len(PATH.findall(text)) > 40 and len(MODULE.findall(text)) > 10  # the page does name the tree
    assert missing(text) == []


def test_a_stale_name_is_caught():
    text = (
        "`snapstream_core/gemv.py` and `snapstream_core.cpu_attention.build`, then `evals/report.py` "
        "(kept: `evals/report/`, `tasks/<name>/__init__.py`, `tests/runner_utils.compose_cfg`, "
        "`evals.execute.loop.run`)"
    )
    assert missing(text) == ["evals/report.py", "snapstream_core.cpu_attention.build", "snapstream_core/gemv.py"]
