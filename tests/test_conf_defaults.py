"""One source of truth for the compression knobs: every ``conf/compression/*.yaml`` key equals the method
dataclass's field default (null for knobs the method does not have), and unknown keys are refused at every entry
point (Hydra's struct check, the Python API, lm-eval ``model_args``)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml

from snapstream_core import compression_from_config
from snapstream_core.methods import METHODS, knob_names

CONF = Path(__file__).resolve().parents[1] / "conf" / "compression"
NON_KNOBS = {"method", "tag"}


def _yaml(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


def test_every_method_has_a_yaml_and_every_yaml_a_method():
    assert {p.stem for p in CONF.glob("*.yaml")} == set(METHODS)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_yaml_defaults_equal_the_dataclass_defaults(name):
    cfg = _yaml(name)
    assert cfg["method"] == name
    assert set(cfg) - NON_KNOBS == set(knob_names()), "every file carries every knob (one sweep sets all methods)"
    applies = set(METHODS[name]().knobs())  # the knobs the method reports (none: no knob applies)
    own = {f.name: f.default for f in fields(METHODS[name]) if f.name in applies}
    assert all(default is not MISSING for default in own.values()), "every knob has a default"
    for key in knob_names():
        expected = own.get(key)  # a knob the method does not have: null
        assert cfg[key] == expected, f"conf/compression/{name}.yaml {key}={cfg[key]!r}, dataclass {expected!r}"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_yaml_builds_the_dataclass_default(name):
    cfg = {k: v for k, v in _yaml(name).items() if k != "tag"}
    assert compression_from_config(cfg) == METHODS[name]()


def test_snapstream_recent_is_256_everywhere():
    from snapstream_core.methods import SnapStream

    assert SnapStream().recent == _yaml("snapstream")["recent"] == 256


@pytest.mark.parametrize("key", ["prompt_budgt", "recnet", "compression_ratio"])
def test_python_api_refuses_unknown_keys(key):
    with pytest.raises(ValueError, match=f"compression.{key}: not a knob of any method"):
        compression_from_config({"method": "snapstream", key: 1})


def test_python_api_still_ignores_other_methods_knobs():
    """``compression=none,snapkv compression.prompt_budget=...`` sweeps set one knob for every method."""
    assert compression_from_config({"method": "none", "prompt_budget": 64, "recent": 8}) == METHODS["none"]()
    assert compression_from_config({"method": "snapkv", "recent": 8}).knobs()["prompt_budget"] == 1024


def test_hydra_refuses_unknown_keys():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(str(CONF.parent), version_base="1.3"):
        with pytest.raises(ConfigCompositionException, match="prompt_budgt"):
            compose("config", overrides=["compression=snapstream", "compression.prompt_budgt=64"])


def test_lm_eval_model_args_refuse_unknown_keys():
    pytest.importorskip("lm_eval")
    from evals.lm_eval_model import SnapStreamLM, check_model_args

    check_model_args({"batch_size": 1, "attn_implementation": "sdpa", "ratio": 0.5, "recent": 8})
    with pytest.raises(ValueError, match="model_args prompt_budgt: .*Did you mean 'prompt_budget'"):
        SnapStreamLM(pretrained="/nonexistent", method="snapstream", prompt_budgt=64)  # refused before any load
