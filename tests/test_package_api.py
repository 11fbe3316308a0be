"""The public API of the core: submodules are reachable by name and the README's names are exported."""

from __future__ import annotations

import importlib
import types

import snapstream_core as ss


def test_the_generate_submodule_is_a_module_not_a_function():
    module = importlib.import_module("snapstream_core.generate")
    assert isinstance(module, types.ModuleType)
    assert callable(module.generate)


def test_the_readme_names_are_exported():
    for name in ("SamplingConfig", "SnapStream", "make_cache", "attach", "knob_names", "compression_from_config"):
        assert name in ss.__all__ and hasattr(ss, name), name
    assert ss.SamplingConfig(max_new_tokens=4).max_new_tokens == 4
