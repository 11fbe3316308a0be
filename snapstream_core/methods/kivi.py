"""KIVI: every token kept, stored in 2 or 4 bits (keys per channel, values per token) beside a full-precision window
of the latest tokens.

Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache" (arXiv 2402.02750), as the official
code (jy-yuan/KIVI, ``models/llama_kivi.py`` with ``quant/new_pack.py``) runs it, ``k_bits = v_bits = bits``:

- keys are quantized per channel over groups of ``group_size`` consecutive tokens, values per token over groups of
  ``group_size`` channels (asymmetric min/max codes, :mod:`snapstream_core.quant.kivi`);
- prefill of ``T`` tokens: attention is exact; then keys ``[0, T - T % residual)`` are quantized and the last
  ``T % residual`` kept in full precision (all quantized when ``T % residual == 0``), values all but the last
  ``residual`` (none when ``T <= residual``);
- a decode step attends over the quantized keys and values and the full-precision rest, the new token included;
  after it, the full-precision keys are quantized together once they number ``residual`` (``residual / group_size``
  groups), and the oldest full-precision value once they number ``residual + 1``.

The storage (:class:`~snapstream_core.kivi_layer.KiviLayer`, the engine's
:class:`~snapstream_core.engine.kivi_rows.KiviRowCache`) and its bytes (:class:`KVFormat` ``kivi``) are documented
in ``docs/kv_quant.md``. It keeps every token but is not the full cache (``keeps_all`` is False): its tokens differ.
KIVI has no budget: ``budget_cap`` is ``none`` (it caps nothing) and every knob it does not read is refused
(:func:`snapstream_core.api.compression_from_config`); the search has no budget of it to sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from snapstream_core.methods.base import TAG, CompressionMethod, check_positive
from snapstream_core.policies.kv_format import KIVI_BITS, KVFormat


@dataclass(frozen=True)
class Kivi(CompressionMethod):
    """Knobs: ``bits`` (2 or 4) per key and value element; ``group_size`` tokens per key group and channels per
    value group (it must divide the model's head dim); ``residual`` the latest tokens whose keys stay in full
    precision (a positive multiple of ``group_size``; the values keep ``residual`` to ``residual + 1``)."""

    method: ClassVar[str] = "kivi"
    budget_cap: ClassVar[str] = "none"  # no budget: every token is kept (compression_from_config refuses the rest)
    policy: ClassVar[str] = "append"
    needs_shape: ClassVar[bool] = True
    bits: int = field(default=2, metadata={TAG: "b"})
    group_size: int = field(default=32, metadata={TAG: "g"})
    residual: int = field(default=128, metadata={TAG: "r"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kv_dtype != "auto":
            raise ValueError(f"compression.kv_dtype: kivi stores its own {self.bits}-bit codes; {self.kv_dtype} "
                             "cannot be stacked on it (use kv_dtype=auto)")
        if isinstance(self.bits, bool) or self.bits not in KIVI_BITS:
            raise ValueError(f"compression.bits: must be 2 or 4, got {self.bits!r}")
        check_positive("group_size", self.group_size)
        check_positive("residual", self.residual)
        if self.residual % self.group_size:
            raise ValueError(f"compression.residual: must be a multiple of compression.group_size "
                             f"({self.group_size}): the full-precision keys are quantized group by group, got "
                             f"{self.residual}")
        if self.positions != "original":
            raise ValueError("compression.positions: kivi keeps every token in place, so in_cache would change "
                             f"nothing; use positions=original, got {self.positions!r}")

    @property
    def kv_format(self) -> KVFormat:
        return KVFormat("kivi", bits=self.bits, group_size=self.group_size, residual=self.residual)

    def layer_class(self) -> type:
        from snapstream_core.kivi_layer import KiviLayer

        return KiviLayer

    def check_shape(self, shape: Mapping[str, Any]) -> None:
        """Refuse a model whose head dim ``group_size`` does not divide (the value groups are channels)."""
        D = shape["head_dim"]
        if D % self.group_size:
            raise ValueError(f"compression.group_size: must divide the model's head_dim ({D}), got "
                             f"{self.group_size}")
        if D % (8 // self.bits):
            raise ValueError(f"compression.bits: {8 // self.bits} codes of {self.bits} bits are packed to a byte "
                             f"along the head dim, which the model's head_dim ({D}) is not a multiple of")

    def kept(self, prompt_len: int) -> int:
        return prompt_len

    def needs_selection(self, prompt_len: int) -> bool:
        return False
