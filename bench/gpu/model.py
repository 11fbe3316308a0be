"""The GPU check's model (random weights: time and memory depend on shapes only), its planner node and the
versions of the stack it runs on."""

from __future__ import annotations

from typing import Any

from bench.gpu.shapes import LLAMA_8B_ARCH, TINY_ARCH


def build_model(tiny: bool):
    """``(model, device)``: random weights, Llama-3.1-8B's shape in bf16 on CUDA, or TINY_ARCH in fp32 on CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    config = LlamaConfig(**(TINY_ARCH if tiny else LLAMA_8B_ARCH))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval(), device


def model_node(model) -> dict[str, Any]:
    """The planner's ``model`` node of this model (its shape counted from the model itself)."""
    c = model.config
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    shape = dict(n_params=sum(p.numel() for p in model.parameters()), n_layers=c.num_hidden_layers,
                 hidden=c.hidden_size, intermediate=c.intermediate_size, n_heads=c.num_attention_heads,
                 n_kv_heads=c.num_key_value_heads, head_dim=c.hidden_size // c.num_attention_heads,
                 vocab=c.vocab_size, max_positions=c.max_position_embeddings, dtype=dtype)
    return {"name": "llama31_8b_shape", "family": "r1", "dtype": dtype, "max_context": c.max_position_embeddings,
            "shape": shape}


def versions() -> dict[str, str | None]:
    import importlib.metadata as md
    import platform

    import torch

    out: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__,
                                  "cuda": torch.version.cuda,
                                  "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for pkg in ("transformers", "huggingface_hub", "triton", "tokenizers", "safetensors"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out
