"""The models a benchmark runs and the prompts it feeds them.

- A model of the harness (``conf/model/<name>.yaml``, e.g. the embedded ``smollm2_135m`` or ``tiny_llama``), loaded
  with :func:`evals.config.models.load_model`; prompts are prefixes of one real text (the needle task's essay haystack).
- ``llama31_8b_shape``: Llama-3.1-8B's architecture (32 layers, hidden 4096, 32 heads, 8 KV heads, MLP 14336,
  vocab 128256, llama3 RoPE scaling to 131072 positions) with random weights, built directly on the GPU; prompts are
  random token ids. Timing and memory depend on shapes only, so no download is needed. Needs torch and
  transformers only (no Hydra).

On the CPU with ``cpu_kernels`` (the default), :func:`load` moves the weights into one block on huge pages
(:func:`bench.cpu_decode.memory.pack_parameters`), where the compiled step reads them faster.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from bench.config import LLAMA_8B_SHAPE, BenchConfig
from bench.cpu_decode import memory

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent

LLAMA_8B_ARCH = dict(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    bos_token_id=128000,
    eos_token_id=128009,
    pad_token_id=128009,
    tie_word_embeddings=False,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
)


class Prompts:
    """Prompts of any length up to ``ids.shape[-1]``: prefixes of one fixed token sequence, so that every method
    sees the same tokens at a given context."""

    def __init__(self, ids: torch.Tensor):
        self.ids = ids  # (1, N) long

    def __call__(self, length: int) -> torch.Tensor:
        if length > self.ids.shape[-1]:
            raise ValueError(f"bench.contexts: {length} tokens is more than the prompt source holds")
        return self.ids[:, :length]


def _model_node(cfg: BenchConfig):
    from omegaconf import OmegaConf

    path = REPO / "conf" / "model" / f"{cfg.model}.yaml"
    if not path.is_file():
        raise ValueError(f"bench.model: no conf/model/{cfg.model}.yaml (and not {LLAMA_8B_SHAPE!r})")
    node = OmegaConf.load(path)
    node.dtype = cfg.dtype
    node.device = cfg.device
    node.attn_implementation = cfg.attns[0]
    return node


def max_positions(cfg: BenchConfig) -> int:
    """The model's position limit, read without loading weights."""
    if cfg.model == LLAMA_8B_SHAPE:
        return LLAMA_8B_ARCH["max_position_embeddings"]
    node = _model_node(cfg)
    if node.source == "random":
        return int(node.arch.max_position_embeddings)
    from transformers import AutoConfig

    from evals.config.models import embedded_dir

    where = {"embedded": None, "path": node.path, "hub": node.hub_id}[node.source]
    return int(AutoConfig.from_pretrained(str(embedded_dir()) if where is None else where).max_position_embeddings)


def _llama_8b_shape(cfg: BenchConfig):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**LLAMA_8B_ARCH)
    config._attn_implementation = cfg.attns[0]
    torch.manual_seed(cfg.seed)
    with torch.device(cfg.device):
        model = LlamaForCausalLM._from_config(config, dtype=getattr(torch, cfg.dtype))
    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, config.vocab_size, (1, config.max_position_embeddings), generator=gen)
    return model.eval(), Prompts(ids)


def _text_ids(tokenizer, n_tokens: int) -> torch.Tensor:
    from tasks.needle import haystack_text

    text = haystack_text()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(ids) < n_tokens:  # longer than the haystack: repeat it
        ids = ids + ids
    return torch.tensor([ids[:n_tokens]], dtype=torch.long)


def load(cfg: BenchConfig, n_tokens: int):
    """``(model, prompts)``: the model in eval mode on ``cfg.device`` and a source of prompts up to ``n_tokens``."""
    if cfg.model == LLAMA_8B_SHAPE:
        model, prompts = _llama_8b_shape(cfg)
    else:
        from evals.config.models import load_model

        model, tokenizer = load_model(_model_node(cfg))
        prompts = Prompts(_text_ids(tokenizer, n_tokens))
    if cfg.cpu_kernels:
        _pack(model)
    return model, prompts


def _pack(model) -> None:
    """The CPU weights into one block on huge pages (nothing moves on a GPU)."""
    moved = memory.pack_parameters(model)
    if moved:
        log.info(
            "model weights: %.0f MiB moved into one block of CPU memory (transparent huge pages: %s)",
            moved / 2**20,
            memory.huge_pages(),
        )
