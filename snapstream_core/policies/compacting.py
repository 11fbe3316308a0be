"""Compacting: a whole-cache budget kept by compacting every row in the engine (``rkv``, ``snapkv_decode``,
``triattention``). The cache grows by one entry a step and is cut back to ``cap`` entries at the compaction points,
so the entries held are a sawtooth that depends only on ``(T, steps)``; a row allocates its peak.

Two triggers (plain names, the references' schedules; ``snapstream_core/methods/decode_base.py`` cites them):

- ``interval`` (R-KV): the token at position ``p`` compacts when ``p % interval == 0`` and the cache then holds at
  least ``budget`` entries;
- ``slack`` (TriAttention): the cache, prompt included, grows to ``budget + interval`` entries; the step that writes
  the last of them compacts to ``cap``, and so every ``budget + interval - cap`` tokens after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.policies.base import StoragePolicy

TRIGGERS = ("interval", "slack")


@dataclass(frozen=True)
class CompactingPolicy(StoragePolicy):
    """``kept`` entries after the prefill (``budget`` when the prompt is cut); compactions keep ``cap`` entries;
    ``interval`` tokens between compaction points; ``query_ring`` queries per layer a row keeps for the scores;
    ``prompt_cut``: the prefill cut the prompt with the compaction's rule. (What a scorer holds beyond that, R-KV's
    key pairs, is the method's: ``DecodeMethod.key_pairs``.)"""

    name: ClassVar[str] = "compacting"
    budget: int = 1
    cap: int = 1
    interval: int = 1
    trigger: str = "interval"
    query_ring: int = 0
    attn_sum: bool = False  # each slot's accumulated attention kept per row (H2O: RowBatch.attn_sum)
    prompt_cut: bool = False

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ValueError(f"CompactingPolicy.trigger: must be one of {TRIGGERS}, got {self.trigger!r}")

    # ------------------------------------------------------------------ the schedule
    def _first(self) -> int:
        """Slack trigger: the write number of the first compaction (the cache reaches ``budget + interval``)."""
        return max(1, self.budget + self.interval - self.prompt_len)

    def _period(self) -> int:
        return max(1, self.budget + self.interval - self.cap)

    def points(self, steps: int) -> range:
        """Write numbers ``k`` in ``[1, steps]`` that may compact (the interval trigger's positions; the slack
        trigger's compactions)."""
        if self.trigger == "slack":
            return range(self._first(), steps + 1, self._period())
        T = self.prompt_len
        first = -(-T // self.interval) * self.interval - T + 1
        return range(first, steps + 1, self.interval)

    def compacts(self, steps: int) -> bool:
        """Whether the ``steps``-th decoded token written (at position ``T + steps - 1``) compacts."""
        if steps < 1:
            return False
        if self.trigger == "slack":
            first = self._first()
            return steps >= first and (steps - first) % self._period() == 0
        p = self.prompt_len + steps - 1
        return p % self.interval == 0 and self.tokens_held(steps - 1) + 1 >= self.budget

    def tokens_held(self, steps: int) -> int:
        """Entries held after ``steps`` decoded tokens written and compacted (the sawtooth)."""
        if self.trigger == "slack":
            first = self._first()
            if steps < first:
                return self.prompt_len + steps
            # a compaction keeps min(held, cap): with a protected prompt and window above budget + interval the
            # cache compacts every step and keeps all until it reaches cap
            return min(self.prompt_len + steps, self.cap + (steps - first) % self._period())
        held, done = self.kept, 0
        for k in self.points(steps):
            before = held + (k - done)
            held, done = (min(before, self.cap) if before >= self.budget else before), k
        return held + (steps - done)

    def peak_tokens(self, steps: int) -> int:
        """Most entries held at once while ``steps`` tokens are written (a step attends before it compacts)."""
        if self.trigger == "slack":
            if steps < self._first():
                return self.prompt_len + steps
            return min(self.prompt_len + steps, max(self.prompt_len + self._first(), self.cap + self._period()))
        peak = self.kept
        for k in self.points(steps):
            peak = max(peak, self.tokens_held(k - 1) + 1)
        return max(peak, self.tokens_held(steps))

    def mean_tokens_held(self, gen_tokens: int) -> float:
        """Mean of the sawtooth over steps ``1..gen_tokens``: summed a segment (between compactions) at a time."""
        G = gen_tokens
        if G <= 0:
            return float(self.tokens_held(0))
        total, k = 0, 1
        for point in [*self.points(G), G + 1]:  # steps k..point-1 grow by one from tokens_held(k)
            if point > k:
                n, first = point - k, self.tokens_held(k)
                total += n * first + n * (n - 1) // 2
            if point <= G:
                total += self.tokens_held(point)
            k = point + 1
        return total / G

    def footprint(self, new_tokens: int) -> int:
        """The most entries held at once over a generation of ``new_tokens`` (a bound: the cache shrinks)."""
        return self.peak_tokens(max(new_tokens - 1, 0))

    def slots(self, max_new_tokens: int) -> int:
        """The most entries held at once (at most ``cap + interval`` for the interval trigger)."""
        return self.peak_tokens(max(max_new_tokens - 1, 0))

    def keeps_all(self, new_tokens: int) -> bool:
        """No prefill cut and no compaction over the run (a compaction that keeps every entry still reorders)."""
        steps = max(new_tokens - 1, 0)
        return not self.prompt_cut and not any(self.compacts(k) for k in self.points(steps))

    def row_memory(self, slots: int) -> dict[str, int]:
        """Slot positions and a compaction, the ring of ``query_ring`` queries per layer and, with ``attn_sum``,
        each slot's accumulated attention (the prompt cut's key pairs are added by the method)."""
        return {"compacts": 1, "query_ring": self.query_ring, "attn_sum": int(self.attn_sum), "prefill_pairs": 0}

    @classmethod
    def layer_class(cls) -> type:
        """The prefill cut is stored as an appended prefix; the engine compacts the rows, not this layer."""
        from snapstream_core.layer import AppendLayer

        return AppendLayer
