"""The layout of ``snapstream_core/``, drawn from its own imports (every import in a file counts: at the top, inside
a function, under ``TYPE_CHECKING``): no import loop, and the methods sit below the engine (a method's module never
imports the engine, which drives the methods). The same rules as ``tests/test_evals_layers.py`` for ``evals/``."""

from __future__ import annotations

from tests.test_evals_layers import ROOT, _imports, _modules, loops

CORE = _modules("snapstream_core")
GRAPH = {name: _imports(path, name, CORE) for name, path in CORE.items()}
ENGINE = "snapstream_core.engine"
METHODS = "snapstream_core.methods"


def test_the_core_has_no_import_loop():
    assert not loops(GRAPH), loops(GRAPH)


def test_the_loop_finder_sees_an_import_inside_a_function(tmp_path):
    """The check would have caught the loop it replaced: ``methods/decode_base.py`` importing
    ``engine/compact.py`` inside a function while ``engine/compact.py`` imports ``decode_base`` at the top."""
    base = tmp_path / "decode_base.py"
    base.write_text("def select():\n    from snapstream_core.engine.compact import prefill_selection\n")
    known = {**CORE, "snapstream_core.methods.decode_base": base}
    graph = {**GRAPH, "snapstream_core.methods.decode_base": _imports(base, "snapstream_core.methods.decode_base",
                                                                       known)}
    graph["snapstream_core.engine.compact"] = graph["snapstream_core.engine.compact"] | {
        "snapstream_core.methods.decode_base"}
    assert ["snapstream_core.engine.compact", "snapstream_core.methods.decode_base"] in loops(graph)


def test_no_method_imports_the_engine():
    bad = [f"{name} -> {t}" for name, targets in GRAPH.items() if name.startswith(METHODS)
           for t in targets if t == ENGINE or t.startswith(ENGINE + ".")]
    assert not bad, "\n".join(bad)


def test_every_core_module_is_in_the_graph():
    assert len(CORE) == len(list((ROOT / "snapstream_core").rglob("*.py"))) and ENGINE + ".loop" in GRAPH
