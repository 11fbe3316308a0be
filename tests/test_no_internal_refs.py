"""No user-facing output names an issue: the strings the harness prints or writes carry no issue numbers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\bissue\s+#?\d+", re.IGNORECASE)


def _output_strings(path: Path):
    """String constants of a module other than docstrings and comments (f-string parts included), plus the first
    paragraph of the module docstring (argparse descriptions print it)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}
    if "__doc__" in path.read_text():
        yield (ast.get_docstring(tree) or "").split("\n\n")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_no_printed_string_names_an_issue():
    found = []
    for folder in ("evals", "tasks", "sandbox", "snapstream_core", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}: {s.strip()[:80]}" for s in _output_strings(path) if ISSUE.search(s)]
    assert found == []
