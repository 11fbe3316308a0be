"""One source of truth for the compression knobs: every ``conf/compression/*.yaml`` file (optional) carries the
method dataclass's knobs at their field defaults and the tag generated from its fields (``evals/config/conf_store.py``);
every composed ``compression`` node carries every knob; unknown keys are refused at every entry point (Hydra's
struct check, the runner's check of an appended key, the Python API, dataclass construction, lm-eval
``model_args``)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from evals.config.conf_store import KNOBS_NODE, method_node, own_defaults, run_tag
from snapstream_core import compression_from_config
from snapstream_core.methods import METHODS, knob_names
from snapstream_core.methods.base import tag_prefix
from tests.runner_utils import compose_cfg

CONF = Path(__file__).resolve().parents[1] / "conf" / "compression"
NON_KNOBS = {"method", "tag"}


def _yaml(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


BUILT_IN = {"none", "snapkv", "streaming_llm", "snapstream"}  # the methods whose files document the knobs


def test_every_yaml_is_a_registered_method():
    """The files are optional (documentation): the built-in methods keep theirs, none names a stray method, and a
    method added with or without one passes this file."""
    stems = {p.stem for p in CONF.glob("*.yaml")}
    assert BUILT_IN <= stems <= set(METHODS)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_yaml_keys_defaults_and_tag_equal_the_generated_node(name):
    if not (CONF / f"{name}.yaml").is_file():
        pytest.skip(f"{name} has no conf/compression/{name}.yaml (optional)")
    cfg = _yaml(name)
    assert cfg.pop("defaults") == [f"/{KNOBS_NODE}@_here_", "_self_"], "the other methods' knobs come from there"
    own = own_defaults(METHODS[name])
    assert all(default is not MISSING for default in own.values()), "every knob has a default"
    assert set(cfg) - NON_KNOBS == set(own), f"conf/compression/{name}.yaml: keys other than the method's knobs"
    for key, expected in own.items():
        assert cfg[key] == expected, f"conf/compression/{name}.yaml {key}={cfg[key]!r}, dataclass {expected!r}"
    assert cfg["method"] == name
    assert cfg["tag"] == run_tag(METHODS[name]), "run directories keep their names"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_composed_node_carries_every_knob_and_equals_the_generated_one(name):
    cfg = OmegaConf.to_container(compose_cfg([f"compression={name}"]).compression)
    assert list(cfg) == ["method", *knob_names(), "tag"], "one sweep can set any knob for all methods"
    assert cfg == method_node(METHODS[name])


def test_generated_tags_resolve_to_todays_directory_names():
    """The names README examples and existing result folders use."""
    tags = {n: compose_cfg([f"compression={n}", "compression.prompt_budget=64"]).compression.tag for n in BUILT_IN}
    assert tags == {
        "none": "none",
        "snapkv": "snapkv-pb64-w32-k7-max-mean-s0-original-crNone",
        "streaming_llm": "streaming_llm-cache-pb64-s4-rNone-original",
        "snapstream": "snapstream-pb64-r256-w32-k7-max-mean-s4-original-crNone",
    }


def test_tag_prefix_is_the_field_metadata_else_the_initials():
    by_name = {f.name: f for f in fields(METHODS["snapstream"])}
    assert [tag_prefix(by_name[n]) for n in ("prompt_budget", "window", "ratio", "pooling", "positions")] == [
        "pb", "w", "cr", "", ""
    ]


def test_a_tag_order_that_misses_a_knob_is_refused():
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass(frozen=True)
    class Partial(METHODS["snapkv"]):
        method: ClassVar[str] = "partial"
        tag_order: ClassVar[tuple[str, ...]] = ("prompt_budget",)

    with pytest.raises(ValueError, match="Partial.tag_order: must list each knob once"):
        run_tag(Partial)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_composed_node_builds_the_dataclass_default(name):
    cfg = OmegaConf.to_container(compose_cfg([f"compression={name}"]).compression)
    assert compression_from_config({k: v for k, v in cfg.items() if k != "tag"}) == METHODS[name]()


def test_snapstream_recent_is_256_everywhere():
    from snapstream_core.methods import SnapStream

    assert SnapStream().recent == _yaml("snapstream")["recent"] == 256


@pytest.mark.parametrize("key", ["prompt_budgt", "recnet", "compression_ratio"])
def test_python_api_refuses_unknown_keys(key):
    with pytest.raises(ValueError, match=f"compression.{key}: not a knob of any method"):
        compression_from_config({"method": "snapstream", key: 1})


def test_python_api_refuses_other_methods_knobs_but_the_full_cache_takes_any():
    """``compression=none,snapkv compression.prompt_budget=...`` sweeps set one knob for every method: the full cache
    reads none and accepts any; a method refuses a knob it does not read (never runs at its default unsaid)."""
    assert compression_from_config({"method": "none", "prompt_budget": 64, "recent": 8}) == METHODS["none"]()
    with pytest.raises(ValueError, match=r"^compression\.recent: snapkv does not read it"):
        compression_from_config({"method": "snapkv", "recent": 8})


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hydra_refuses_unknown_keys(name):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="prompt_budgt"):
        compose_cfg([f"compression={name}", "compression.prompt_budgt=64"])


def test_an_appended_unknown_key_is_refused_before_any_work():
    """``+compression.<key>=`` gets past Hydra's struct check; the runner's check (before data or weights) and the
    command line refuse it with one line."""
    from evals.cli import validate
    from evals.config.spec import check

    cfg = compose_cfg(["model=tiny_llama", "compression=snapkv", "+compression.prompt_budgt=64"])
    with pytest.raises(ValueError, match="compression.prompt_budgt: not a knob of any method"):
        check(cfg)
    (line,) = validate(["model=tiny_llama", "compression=snapkv", "+compression.prompt_budgt=64"])
    assert line.startswith("compression.prompt_budgt: not a knob of any method")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_dataclass_construction_refuses_unknown_keys(name):
    with pytest.raises(TypeError, match="prompt_budgt"):
        METHODS[name](prompt_budgt=64)


def test_lm_eval_model_args_refuse_unknown_keys():
    pytest.importorskip("lm_eval")
    from evals.lm_eval_model import SnapStreamLM, check_model_args

    check_model_args({"batch_size": 1, "attn_implementation": "sdpa", "ratio": 0.5, "recent": 8})
    with pytest.raises(ValueError, match="model_args prompt_budgt: .*Did you mean 'prompt_budget'"):
        SnapStreamLM(pretrained="/nonexistent", method="snapstream", prompt_budgt=64)  # refused before any load
