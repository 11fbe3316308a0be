"""Shared fixtures: a tiny random Llama (GQA) and the embedded SmolLM2, both on CPU."""

from __future__ import annotations

import os

from evals.cpus import THREAD_VARS, prepare, usable_cpus

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Runs that a test compares are generated, not reused from the sample cache (tests/test_sample_cache.py turns it on)
os.environ["SNAPSTREAM_SAMPLE_CACHE"] = "off"


def _share_cores_between_workers() -> None:
    """Before torch loads: under pytest-xdist (``make test -n JOBS``), each worker and the processes it starts get
    the usable CPUs / workers threads (two workers with two OpenMP threads each on two cores spin against each other
    several times slower); every process waits passively (:mod:`evals.cpus`)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        for var in THREAD_VARS:
            os.environ[var] = str(max(1, usable_cpus() // workers))
    prepare()


_share_cores_between_workers()

import pytest  # noqa: E402
import torch  # noqa: E402


def tiny_config(**overrides):
    from transformers import LlamaConfig

    base = dict(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    base.update(overrides)
    return LlamaConfig(**base)


@pytest.fixture(scope="session")
def tiny_model():
    """A 2-layer Llama with random weights (4 heads, 2 KV heads), sdpa attention."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config()).eval()
    model.set_attn_implementation("sdpa")
    return model


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct (converted once per machine) and its tokenizer."""
    from omegaconf import OmegaConf

    from evals.config.models import load_model

    cfg = OmegaConf.load(os.path.join(os.path.dirname(__file__), "..", "conf", "model", "smollm2_135m.yaml"))
    model, tok = load_model(cfg)
    return model, tok


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """``model=tiny_llama`` (random weights, the SmolLM2 tokenizer) saved as a model folder, for code that loads
    models by path (lm-eval's HFLM)."""
    from omegaconf import OmegaConf

    from evals.config.models import load_model

    cfg = OmegaConf.load(os.path.join(os.path.dirname(__file__), "..", "conf", "model", "tiny_llama.yaml"))
    model, tok = load_model(cfg)
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    """Each test file starts with Dynamo's caches empty: its recompile limit counts per code object, so the
    compiled steps of earlier files in the same worker would otherwise make a later file's compile fall back."""
    torch._dynamo.reset()
    yield
