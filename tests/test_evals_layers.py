"""The layout of the code, drawn from its own imports: ``evals/`` folders import one way (no import runs back up to a
parent folder, no import loop, each folder only from its own layer or lower ones), no source module is over 450 lines,
and the runner never probes a backend for a capability."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450
# evals' folders, lowest layer first: a module may import from its own layer or a lower one
LAYERS = [
    ("evals/record",),
    ("evals/analysis",),
    ("evals/report",),
    ("evals/config",),
    ("evals/plan",),
    ("evals/execute",),
    ("evals", "evals/search"),  # entry points and the commands' glue
]
# the program that runs inside the sandbox is copied alone into each job folder and run as a script: one file
LONG_ALLOWED = {"sandbox/driver.py"}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _modules(folder: str) -> dict[str, Path]:
    return {_module(p): p for p in sorted((ROOT / folder).rglob("*.py"))}


def _imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        found |= {t for t in targets if t in known and t != name}
    return found


def _folder(name: str, known: dict[str, Path]) -> str:
    path = known[name].relative_to(ROOT)
    return str(path.parent)


def _layer(folder: str, name: str = "") -> int:
    if name.endswith(".__main__"):
        return len(LAYERS) - 1  # a command: an entry point wherever it sits
    best = None
    for i, group in enumerate(LAYERS):
        for prefix in group:
            if folder == prefix or folder.startswith(prefix + "/"):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{folder}: not in LAYERS (tests/test_layout.py): say which layer it belongs to"
    return best[0]


GRAPH = {n: _imports(p, n, _modules("evals")) for n, p in _modules("evals").items()}


def test_no_import_runs_back_up_or_down_a_layer():
    known = _modules("evals")
    bad = []
    for name, targets in GRAPH.items():
        here = _folder(name, known)
        for t in targets:
            there = _folder(t, known)
            if here != there and here.startswith(there + "/") and not name.endswith(".__main__"):
                bad.append(f"{name} -> {t} (runs back up to {there}/)")
            elif _layer(there, t) > _layer(here, name):
                bad.append(f"{name} -> {t} ({there}/ is a higher layer than {here}/)")
    assert not bad, "\n".join(bad)


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is an import loop."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_loop():
    assert not loops(GRAPH), loops(GRAPH)


@pytest.mark.parametrize("folder", ["evals", "tasks", "snapstream_core", "sandbox"])
def test_no_source_module_is_over_450_lines(folder):
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(ROOT)) not in LONG_ALLOWED]
    assert not long, long


def test_the_runner_never_probes_a_backend():
    probes = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "evals").rglob("*.py"))
              for i, line in enumerate(p.read_text().splitlines(), 1) if "hasattr(backend" in line]
    assert not probes, probes
