"""What a compressed cache actually held during one generation: measured, not predicted."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KVStats:
    """Running KV-memory accounting of one cache (all layers).

    ``tokens`` counts filled entries per layer and KV head for one sequence (the mean over layers and heads, rounded,
    when they hold different counts); ``bytes`` counts the K and V storage the
    cache holds (preallocated ring slots included), divided by the batch size so that figures are per sequence.
    ``prefill_bytes_peak`` includes the transient full-prompt KV of the layer being compressed.

    Tokens held and bytes allocated differ when slots are allocated but hold nothing (free ring slots, the padding
    of a ragged policy's heads): ``kv_tokens_total_after_prefill`` counts the entries held after the prefill summed
    over layers and KV heads, ``kv_held_bytes_after_prefill`` their K and V bytes, beside the bytes allocated
    (``kv_bytes_after_prefill``); all per sequence.
    """

    n_layers: int
    layer_bytes: dict[int, int] = field(default_factory=dict)
    layer_tokens: dict[int, int] = field(default_factory=dict)
    layer_held: dict[int, tuple[int, int]] = field(default_factory=dict)  # (entries over KV heads, bytes per entry)
    batch: int = 1
    kv_tokens_peak: int = 0
    kv_bytes_peak: int = 0
    prefill_bytes_peak: int = 0
    kv_bytes_after_prefill: int = 0
    kv_tokens_after_prefill: int = 0
    kv_bytes_now: int = 0
    kv_tokens_now: int = 0
    kv_tokens_total_after_prefill: int = 0
    kv_held_bytes_after_prefill: int = 0
    _in_prefill: bool = True

    def record(self, layer_idx: int, nbytes: int, tokens: int, batch: int, held: int | None = None,
               slot_bytes: int = 0) -> None:
        """A layer changed size (called by the layer after every update and after compression). ``held``: entries
        held summed over its KV heads per sequence (None: not known), ``slot_bytes``: K and V bytes of one entry."""
        self.layer_bytes[layer_idx] = nbytes
        self.layer_tokens[layer_idx] = tokens
        if held is not None:
            self.layer_held[layer_idx] = (held, slot_bytes)
        self.batch = max(batch, 1)
        if self._in_prefill:  # decode steps only update the per-layer figures; step_done sums them
            total = sum(self.layer_bytes.values()) // self.batch
            self.prefill_bytes_peak = max(self.prefill_bytes_peak, total)

    def step_done(self) -> None:
        """The last layer finished a forward step: record the steady-state figures."""
        self.kv_bytes_now = sum(self.layer_bytes.values()) // self.batch
        # the mean over layers (every layer holds as many, but under per-layer budgets: the ragged policy)
        self.kv_tokens_now = round(sum(self.layer_tokens.values()) / max(len(self.layer_tokens), 1))
        self.kv_bytes_peak = max(self.kv_bytes_peak, self.kv_bytes_now)
        self.kv_tokens_peak = max(self.kv_tokens_peak, self.kv_tokens_now)
        if self._in_prefill:
            self._in_prefill = False
            self.prefill_bytes_peak = max(self.prefill_bytes_peak, self.kv_bytes_now)
            self.kv_bytes_after_prefill = self.kv_bytes_now
            self.kv_tokens_after_prefill = self.kv_tokens_now
            self.kv_tokens_total_after_prefill = sum(n for n, _ in self.layer_held.values())
            self.kv_held_bytes_after_prefill = sum(n * b for n, b in self.layer_held.values())

    def as_row(self) -> dict[str, int]:
        return {
            "kv_tokens_peak": self.kv_tokens_peak,
            "kv_bytes_peak": self.kv_bytes_peak,
            "kv_prefill_bytes_peak": self.prefill_bytes_peak,
            "kv_bytes_after_prefill": self.kv_bytes_after_prefill,
            "kv_bytes_final": self.kv_bytes_now,
            "kv_tokens_total_after_prefill": self.kv_tokens_total_after_prefill,
            "kv_held_bytes_after_prefill": self.kv_held_bytes_after_prefill,
        }
