"""Random eviction: the prompt kept, the decoded tokens kept at random, on the other decode methods' schedule.

The baseline of "Random Attention" (arXiv 2609.03430, 2026), which reports that it matches the strongest scored
evictor on reasoning tasks: the control every decode table carries at the same ``budget``, so a scored method's gain
over chance is measured, not assumed. Each (sample, layer, KV head) ranks token positions by a seeded permutation:
token ``p`` gets the priority ``u(key, layer * H_kv + head, p)``, 24 uniform random bits from the engine's counter
hash (:func:`snapstream_core.engine.noise.uniforms_at`) keyed on the sample's noise key (``gen.seed``, item, sample
index: :func:`~snapstream_core.engine.noise.sample_key`, salted so it is not the token sampler's stream). A token's
priority never changes, so after every compaction a row holds the prompt, the last ``window`` tokens and the
``budget - prompt - window`` decoded tokens of highest priority among all decoded before the window: a uniformly
random subset, the same whatever row, neighbours or batch the sample decodes in. The seed is ``gen.seed`` (through
the key): there is no knob of its own, so one run's samples are independent draws and a re-run is identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    import torch

SALT = 0x52414E444F4D  # "RANDOM": the eviction's stream, apart from the token sampler's (same key)


@dataclass(frozen=True)
class RandomEvict(DecodeMethod):
    """Knobs: ``budget`` entries per layer and KV head for the whole cache (the prompt counts; a prompt of ``budget
    - window`` tokens or more keeps only itself and the window), ``interval`` tokens between compactions,
    ``window`` recent entries always kept (:class:`DecodeMethod`). ``protect_prompt`` is true and fixed: the
    prompt is never evicted."""

    method: ClassVar[str] = "random"
    policy: ClassVar[str] = "compacting"
    tag_order: ClassVar[tuple[str, ...]] = ("budget", "interval", "window", "protect_prompt", "positions")
    protect_prompt: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.protect_prompt is not True:
            raise ValueError(f"compression.protect_prompt: random keeps the prompt and evicts decoded tokens only, "
                             f"got {self.protect_prompt!r}")

    def compact_scores(self, view: CompactView) -> torch.Tensor:
        """(R, H_kv, S) float32 priorities: :func:`priorities` of each slot's position."""
        if view.row_keys is None:
            raise ValueError("compression=random: the compaction needs each row's sample key (CompactView.row_keys)")
        return priorities(view.row_keys, view.layer_idx, view.positions)

    def compaction_scratch(self, arch, slots: int) -> int:
        """Bytes per engine row at a compaction's peak (``memory.compaction_bytes``): one layer's move with every
        layer's scores held (``memory.move_bytes``), and its priorities drawn in fp32 beside their int64 counter
        hash: 16 bytes per (KV head, slot), measured on CPU (``tests/test_compaction_memory.py``)."""
        from snapstream_core.memory import move_bytes

        return move_bytes(arch, slots) + 16 * arch.n_kv_heads * slots


def priorities(row_keys: torch.Tensor, layer: int, positions: torch.Tensor) -> torch.Tensor:
    """row_keys (R,) long, positions (R, H_kv, S) long -> (R, H_kv, S) float32 in (0, 1): a pure function of (key,
    layer, KV head, position), no global RNG, no host synchronisation."""
    import torch

    from snapstream_core.counter_hash import uniforms_at

    R, H_kv, S = positions.shape
    keys = (row_keys ^ SALT)[:, None].expand(R, H_kv).reshape(-1)
    stream = (layer * H_kv + torch.arange(H_kv, device=positions.device)).expand(R, H_kv).reshape(-1)
    return uniforms_at(keys, stream, positions.reshape(R * H_kv, S)).view(R, H_kv, S)
