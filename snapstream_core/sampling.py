"""The sampling knobs of a generation (``gen.*``), checked without importing torch or transformers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import GenerationConfig
    from transformers.generation.logits_process import LogitsProcessorList


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding knobs. ``temperature == 0`` means greedy; ``top_k == 0`` and ``top_p == 1`` disable those filters."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "temperature", "top_p", "top_k", "n"):  # NaN passes every comparison below
            if isinstance(getattr(self, name), float) and not math.isfinite(getattr(self, name)):
                key = "n_samples" if name == "n" else name
                raise ValueError(f"gen.{key}: must be finite, got {getattr(self, name)}")
        if self.max_new_tokens < 1:
            raise ValueError(f"gen.max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"gen.temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"gen.top_p: must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"gen.top_k: must be >= 0, got {self.top_k}")
        if self.n < 1:
            raise ValueError(f"gen.n_samples: must be >= 1, got {self.n}")

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0

    def generation_config(self, max_new_tokens: int, eos: list[int], pad: int) -> GenerationConfig:
        from transformers import GenerationConfig

        kw = dict(max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad, do_sample=self.do_sample)
        if self.do_sample:
            # top_k=0, not None: transformers fills a None top_k with its global default 50 (GenerationConfig
            # defaults), while 0 adds no TopKLogitsWarper (GenerationMixin._get_logits_processor); vLLM, open-r1,
            # lighteval and lcb_runner apply no top-k unless asked.
            kw.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        else:
            kw.update(temperature=None, top_p=None, top_k=None)
        return GenerationConfig(**kw)

    def warper_names(self) -> str:
        """The sampling warpers in effect, as recorded in each row: ``greedy``, or e.g. ``temperature=0.6,top_p=0.95``
        (the same list :meth:`warpers` builds and ``generate`` applies)."""
        if not self.do_sample:
            return "greedy"
        parts = [f"temperature={self.temperature:g}"] if self.temperature != 1.0 else []
        parts += [f"top_k={self.top_k}"] if self.top_k else []
        parts += [f"top_p={self.top_p:g}"] if self.top_p < 1.0 else []
        return ",".join(parts) or "none"

    def warpers(self) -> LogitsProcessorList:
        """The same filters ``generate`` applies when sampling, for the shared first token of ``n`` samples."""
        from transformers.generation.logits_process import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        procs = LogitsProcessorList()
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k:
            procs.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(self.top_p))
        return procs
