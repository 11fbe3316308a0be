"""``evals/`` imports one way (issue 45): record < analysis < config < plan < execute < entry points. A module of
the configuration, planning or execution folder imports only from its own layer or lower ones, with no loop."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = {"evals.rows", "evals.rundir", "evals.text", "evals.throughput", "evals.geometry", "evals.numbers"}
ANALYSIS = {"evals.stats", "evals.noninferiority", "evals.summary", "evals.headline", "evals.power", "evals.report",
            "evals.search.procedure", "evals.search.runs", "evals.search.output", "evals.search.options"}
ORDER = ["record", "analysis", "config", "plan", "execute"]  # then the entry points, which may import anything
CHECKED = ("config", "plan", "execute")


def layer(module: str) -> str | None:
    """The layer of an ``evals`` module (None: outside evals, or an entry point)."""
    if module.endswith(".__main__"):
        return None
    for name in RECORD:
        if module == name or module.startswith(name + "."):
            return "record"
    for name in ANALYSIS:
        if module == name or module.startswith(name + "."):
            return "analysis"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "evals" and parts[1] in CHECKED else None


def modules() -> dict[str, Path]:
    found = {}
    for folder in CHECKED:
        for path in (ROOT / "evals" / folder).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            if not name.endswith(".__main__"):  # a command: an entry point
                found[name] = path
    return found


def imports(path: Path) -> set[str]:
    """Every ``evals`` module ``path`` imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("evals")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evals"):
            out.add(node.module)
    return out


def test_each_folder_imports_only_its_own_layer_or_lower_ones():
    bad = []
    for name, path in modules().items():
        own = ORDER.index(layer(name))
        for target in imports(path):
            kind = layer(target)
            if kind is None and target.startswith("evals") and not target.endswith("__main__"):
                bad.append(f"{name} -> {target} (an entry point)")
            elif kind is not None and ORDER.index(kind) > own:
                bad.append(f"{name} -> {target} ({kind} above {layer(name)})")
    assert not bad, bad


def test_no_import_loop_among_them():
    found = modules()
    graph = {name: {t for t in imports(path) if t in found and t != name} for name, path in found.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (loop := visit(nxt, [*trail, node])):
                return loop
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            assert (loop := visit(start, [])) is None, " -> ".join(loop)
