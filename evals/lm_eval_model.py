"""``--model snapstream`` for lm-evaluation-harness: its ``HFLM``, with a fresh compressed KV cache per ``generate``.

Every compression knob (``snapstream_core.methods.knob_names()``) is a model argument besides HFLM's own; any
other key is refused (:func:`check_model_args`)::

    lm_eval --model snapstream \
      --model_args pretrained=meta-llama/Llama-3.1-8B-Instruct,method=snapstream,prompt_budget=2048,recent=512 \
      --tasks gsm8k

lm-eval 0.4.13 finds models only in its own registry (no entry points), so this module must be imported before the
CLI looks ``snapstream`` up: run ``python -m evals.lm_eval_cli ...`` (the same arguments as ``lm_eval``), or, from
Python, ``import evals.lm_eval_model`` and then ``lm_eval.simple_evaluate(model="snapstream", ...)``.

How it works: HFLM's ``_model_generate`` passes its keyword arguments to ``model.generate``; this class adds
``past_key_values=<a new CompressedCache>`` there (a cache cannot come from a task's ``generation_kwargs``: those are
shared by every request). HFLM left-pads batches, which the core supports (per-row slot validity in the mask).
Log-likelihood requests are refused: compression acts on generation only.

KV figures: ``get_model_info()`` (lm-eval writes it under ``config`` in the results JSON) carries the method's knobs
and the peak KV held over all calls; ``kv_stats_path=<file.jsonl>`` also writes one line per ``generate`` call with
the ``prompt_hash`` of each context in the batch (the key lm-eval's ``--log_samples`` files use).
"""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import Any

from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.utils import hash_string

from evals.config.kv_storage import check_device
from snapstream_core import CompressionMethod, attach, compression_from_config, make_cache
from snapstream_core.hints import did_you_mean
from snapstream_core.methods import knob_names

log = logging.getLogger(__name__)

# Keyword arguments HFLM forwards to ``from_pretrained`` (its ``**kwargs``) that we pass on; any other key that is
# neither HFLM's nor a knob is refused, since ``from_pretrained`` would silently store it in the model config.
MODEL_KWARGS = ("attn_implementation", "low_cpu_mem_usage", "device_map", "quantization_config", "cache_dir",
                "local_files_only", "token", "use_safetensors", "variant", "torch_dtype")
REFUSED = (
    "--model snapstream compresses the KV cache of generation only; {what} requests (log-likelihood tasks) "
    "would run uncompressed. Run them with --model hf."
)


def compression_from_model_args(args: dict[str, Any]) -> CompressionMethod:
    """The compression method named by ``--model_args`` (``method`` + knobs; other keys are HFLM's).

    Raises ``ValueError`` naming the field for an unknown method or a bad knob."""
    # lm-eval's argument parser turns the string "none" into None.
    method = args.get("method") or "none"
    return compression_from_config({"method": method, **{k: args[k] for k in knob_names() if k in args}})


def check_model_args(kwargs: dict[str, Any]) -> None:
    """Refuse a ``--model_args`` key that is neither a knob, nor an HFLM argument, nor one of :data:`MODEL_KWARGS`
    (a misspelt knob would otherwise reach ``from_pretrained`` and be silently ignored)."""
    hflm = set(inspect.signature(HFLM.__init__).parameters) - {"self", "kwargs"}
    knobs = knob_names()  # from the method dataclasses registered now
    known = [*knobs, *sorted(hflm), *MODEL_KWARGS]
    for key in kwargs:
        if key not in known:
            hint = did_you_mean(key, known)
            raise ValueError(f"model_args {key}: not a compression knob ({', '.join(knobs)}), an HFLM argument or "
                             f"one of {', '.join(MODEL_KWARGS)}.{hint}")


@register_model("snapstream")
class SnapStreamLM(HFLM):
    """HFLM whose ``generate`` calls each run under a fresh :class:`~snapstream_core.CompressedCache`.

    Args:
        pretrained: hub id or local path (or a loaded ``PreTrainedModel``), as for ``--model hf``.
        method: ``none`` | ``snapkv`` | ``streaming_llm`` | ``snapstream``; the other knobs as in
            ``conf/compression``; unset knobs take the method's defaults.
        kv_stats_path: optional JSONL file, one line of measured KV figures per ``generate`` call.
        **kwargs: every other HFLM argument (``batch_size``, ``device``, ``dtype``, ``attn_implementation``, ...).
    """

    def __init__(self, pretrained: Any, method: str | None = "none", kv_stats_path: str | None = None, **kwargs: Any):
        check_model_args(kwargs)
        knobs = {k: kwargs.pop(k) for k in knob_names() if k in kwargs}
        # Checked before any weights load: a bad knob is one ValueError naming it.
        self.method = compression_from_model_args({"method": method, **knobs})
        self.method.check_engine("lm-eval's generate_until (transformers' generate)")
        check_device(self.method)  # FP8 storage needs torch's float8 dtype: refused before HFLM loads weights
        if self.method.knobs().get("ratio") is not None and str(kwargs.get("batch_size", 1)) != "1":
            raise ValueError(f"model_args batch_size: ratio needs batch_size=1 (a left-padded batch shares one "
                             f"budget), got {kwargs['batch_size']}")
        if kwargs.get("backend") == "seq2seq":
            raise ValueError("model_args backend: snapstream compresses decoder-only (causal) models; got seq2seq")
        super().__init__(pretrained, **kwargs)
        if self.backend != "causal":
            raise ValueError(f"model_args pretrained: snapstream needs a decoder-only model; got a {self.backend} one")
        attach(self.model)  # ValueError for attention implementations the core does not wrap
        make_cache(self.model, self.method)  # ValueError for sliding-window layers or positions=in_cache without RoPE
        self.kv_stats_path = Path(kv_stats_path) if kv_stats_path else None
        if self.kv_stats_path is not None:
            self.kv_stats_path.parent.mkdir(parents=True, exist_ok=True)
            self.kv_stats_path.write_text("")
        self.kv_calls: list[dict[str, Any]] = []
        self._batch_contexts: list[str] = []

    def tok_batch_encode(self, strings: list[str], *args, **kwargs):
        """HFLM's encoding, remembering the contexts of the batch about to be generated (for their hashes)."""
        self._batch_contexts = list(strings)
        return super().tok_batch_encode(strings, *args, **kwargs)

    def _model_generate(self, context, max_length: int, stop: list[str], **generation_kwargs):
        """``context``: (B, T) left-padded ids; returns (B, T + new) ids, as HFLM's."""
        if "past_key_values" in generation_kwargs:
            raise ValueError("generation_kwargs: past_key_values is set by --model snapstream, not by the task")
        cache = make_cache(self.model, self.method)
        out = super()._model_generate(context, max_length, stop, past_key_values=cache, **generation_kwargs)
        B, T = context.shape
        record = {
            "batch": B,
            "prompt_tokens": T,
            "new_tokens": out.shape[1] - T,
            **cache.stats.as_row(),
        }
        if len(self._batch_contexts) == B:
            record["prompt_hashes"] = [hash_string(c) for c in self._batch_contexts]
        self.kv_calls.append(record)
        log.debug("snapstream generate: %s", record)
        if self.kv_stats_path is not None:
            with self.kv_stats_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise ValueError(REFUSED.format(what="loglikelihood"))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise ValueError(REFUSED.format(what="loglikelihood_rolling"))

    def get_model_info(self) -> dict:
        """HFLM's model info plus the compression knobs and the KV figures measured so far."""
        info = super().get_model_info()
        kv: dict[str, Any] = {**self.method.knobs(), "generate_calls": len(self.kv_calls)}
        if self.kv_calls:
            kv["kv_tokens_peak"] = max(c["kv_tokens_peak"] for c in self.kv_calls)
            kv["kv_bytes_peak"] = max(c["kv_bytes_peak"] for c in self.kv_calls)
            kv["prompt_tokens_max"] = max(c["prompt_tokens"] for c in self.kv_calls)
        info["snapstream"] = kv
        return info
