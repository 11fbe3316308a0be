"""The engine's per-row state in one object: every (rows,) array a decode step reads or writes, and the host's
mirror of what it needs without reading the device back (after vLLM v1's ``InputBatch``,
``vllm/v1/worker/gpu_input_batch.py``: one place for the rows' arrays, a request added to a row and removed from
it). The K/V slots themselves live in :class:`~snapstream_core.engine.rows.RowCache`; which sample a row holds is
the :class:`~snapstream_core.engine.scheduler.Scheduler`'s.

Device tensors, all (R,) unless said: the slot schedule ``base``, ``offset``, ``period`` (step t writes slot
``base + (offset + t) % period``), ``pos0`` (the position of step 0), ``step``, the noise ``keys``, ``max_new``,
``tok`` (the last token drawn), ``fill`` (highest written slot + 1: the per-row read bound), ``done`` bool, ``out``
(R, width + 1) long (the tokens; the last column takes the writes of done rows), ``reads`` () long (the bounded
steps' slot reads not yet added to the stats), and the rows' sampling settings (:class:`~.noise.RowSampling`).
``pos0`` is the row's prompt length (the position of its step 0).

A decode-time method's rows also compact (:meth:`track_compaction`; :mod:`.compact`): ``pos`` (L, R, H_kv, S) long,
each slot's token position (slots past the held ones: the positions they will be written with), ``queries``
(L, R, H, Q, D) in the K/V dtype or None, the ring of each row's last Q post-RoPE queries at index ``position % Q``
(written by the decode step), and ``attn_sum`` (L, R, H_kv, S) float32 or None, attention accumulated per slot.

Host mirrors, per row: the request's :class:`~snapstream_core.sampling.SamplingConfig` and stop strings, ``held``
slots at the start, the prompt length, steps run (the one host count of a row's steps: the compaction schedule reads
it), whether it is a ring, and when it started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from snapstream_core.engine.noise import RowSampling, pick_rows
from snapstream_core.sampling import SamplingConfig


@dataclass
class HostRow:
    """What the host knows of one row without a device read."""

    sampling: SamplingConfig
    stop: tuple[str, ...] = ()
    held: int = 0  # slots the prefix filled
    steps: int = 0  # decode steps run
    prompt_len: int = 0
    ring: bool = False
    started: float = 0.0


class RowBatch:
    """The per-row arrays of ``rows`` decode rows of ``slots`` slots that keep up to ``width`` new tokens each."""

    def __init__(self, rows: int, slots: int, width: int, eos: torch.Tensor, default: SamplingConfig):
        dev = eos.device
        z = torch.zeros(rows, dtype=torch.long, device=dev)
        self.rows, self.slots, self.width, self.eos = rows, slots, width, eos
        self.base, self.offset, self.period = z.clone(), z.clone(), torch.ones_like(z)
        self.pos0, self.step, self.keys, self.max_new, self.tok, self.fill = (z.clone() for _ in range(6))
        self.reads = torch.zeros((), dtype=torch.long, device=dev)
        self.done = torch.ones(rows, dtype=torch.bool, device=dev)
        self.out = torch.zeros(rows, width + 1, dtype=torch.long, device=dev)
        self.host = [HostRow(default) for _ in range(rows)]
        self._sampling: RowSampling | None = None
        self.pos: torch.Tensor | None = None  # the compaction's arrays (track_compaction)
        self.queries: torch.Tensor | None = None
        self.attn_sum: torch.Tensor | None = None

    def track_compaction(self, layers: int, kv_heads: int, heads: int, query_window: int, head_dim: int,
                         dtype: torch.dtype, attn_sum: bool = False) -> None:
        """Allocate the arrays a compaction reads and moves (see the module docstring): ``pos``, the query ring of
        ``query_window`` queries when it is > 0, and ``attn_sum`` when asked (a method that accumulates attention
        per slot; zeroed when a row takes a sample, moved with its slot by a compaction)."""
        dev = self.eos.device
        self.pos = torch.zeros(layers, self.rows, kv_heads, self.slots, dtype=torch.long, device=dev)
        if query_window:
            self.queries = torch.zeros(layers, self.rows, heads, query_window, head_dim, dtype=dtype, device=dev)
        if attn_sum:
            self.attn_sum = torch.zeros(layers, self.rows, kv_heads, self.slots, dtype=torch.float32, device=dev)
        if dev.type == "cuda":
            for t in (self.pos, self.pos0, self.queries, self.attn_sum):
                if t is not None:
                    torch._dynamo.mark_static_address(t)  # mutated in place by the graphs

    def fits(self, slots: int, width: int) -> bool:
        """Whether a run of ``slots`` slots and ``width`` new tokens per row fits these rows."""
        return slots <= self.slots and width <= self.width

    # ------------------------------------------------------------------ add and remove a request
    def add(self, row: int, schedule: tuple[int, int, int, int], prompt_len: int, key: int, max_new: int,
            sampling: SamplingConfig, stop: tuple[str, ...], logits: torch.Tensor, prefix=None) -> None:
        """Start a sample in ``row``: its slot schedule ``(base, offset, period, held)`` (from
        :meth:`~.rows.RowCache.load`), its noise ``key``, settings, and its first token drawn from the prefill
        ``logits`` (1, V) float32 at noise step 0. ``prefix``: the compressed cache the row just loaded, read when
        the rows compact (its slots' positions and the prompt's last queries, the ring's seed)."""
        base, offset, period, held = schedule
        ring = period < self.slots
        fill = self.slots if ring else held
        for t, v in ((self.base, base), (self.offset, offset), (self.period, period), (self.pos0, prompt_len),
                     (self.step, 0), (self.keys, key), (self.max_new, max_new), (self.fill, fill)):
            t[row] = v
        self.host[row] = HostRow(sampling, stop, held, 0, prompt_len, ring, time.perf_counter())
        self._sampling = None
        if self.pos is not None:
            self._seed_compaction(row, prompt_len, prefix)
        first = pick_rows(logits, self.sampling().rows(row, row + 1), self.keys[row : row + 1],
                          self.step[row : row + 1])
        self.tok[row] = first[0]
        self.out[row, 0] = first[0]
        self.done[row] = torch.isin(first, self.eos)[0] | (max_new <= 1)

    def _seed_compaction(self, row: int, prompt_len: int, prefix) -> None:
        """The compaction's arrays of ``row``: its slots' positions and the prompt's last queries (the ring)."""
        S = self.pos.shape[-1]
        for i, layer in enumerate(prefix.layers):
            n = layer.keys.shape[-2] if layer.ring is None else layer.tokens_held()
            seed = torch.arange(n, device=self.pos.device) if layer.pos is None else layer.pos[0, :, :n]
            self.pos[i, row, :, :n] = seed
            self.pos[i, row, :, n:] = prompt_len + torch.arange(S - n, device=self.pos.device)
            if self.queries is not None:
                tail = layer.query_tail  # (1, H, <=Q, D)
                q = tail.shape[2]
                idx = (torch.arange(prompt_len - q, prompt_len, device=self.pos.device)) % self.queries.shape[3]
                self.queries[i, row].index_copy_(1, idx, tail[0].to(self.queries.dtype))
            if self.attn_sum is not None:  # the kept prompt tokens' attention, summed over the prompt's queries
                prompt = layer.prompt_attention[0]  # (H_kv, T) float32 (the prefill keeps it when the method asks)
                self.attn_sum[i, row] = 0
                self.attn_sum[i, row, :, :n] = prompt.gather(-1, seed.expand(prompt.shape[0], n))

    def due(self, busy: list[int], method) -> list[int]:
        """The busy rows whose last step makes them compact (``method.compacts`` of each row's prompt length and
        steps: host counts, no device read)."""
        return [r for r in busy if method.compacts(self.host[r].prompt_len, self.host[r].steps)]

    def compacted(self, held: dict[int, int], interval: int) -> None:
        """Rows compacted to ``held[row]`` entries: each writes its next token at slot ``held`` and the
        ``interval - 1`` after it, until its next compaction."""
        for row, n in held.items():
            self.base[row], self.offset[row] = n, -self.host[row].steps % interval
            self.period[row] = interval

    def now(self) -> torch.Tensor:
        """(R,) long: the position each row wrote at its last step."""
        return self.pos0 + self.step - 1

    def remove(self, row: int) -> None:
        """The row's sample ended: the row decodes garbage in its own slots until the next :meth:`add` (its
        settings stay, so the sampling ops a step runs do not change)."""
        self.done[row] = True

    def sampling(self) -> RowSampling:
        """The rows' settings as device tensors (rebuilt from the host mirror after an add: no device read)."""
        if self._sampling is None:
            self._sampling = RowSampling.of([h.sampling for h in self.host], self.eos.device)
        return self._sampling

    # ------------------------------------------------------------------ one step
    def slots_now(self, bound: int) -> torch.Tensor:
        """(R,) long: the slot each row writes this step, below ``bound``; raises ``fill`` to cover it."""
        slots = (self.base + (self.offset + self.step) % self.period).clamp(max=bound - 1)
        self.fill = torch.maximum(self.fill, slots + 1)
        return slots

    def positions(self) -> torch.Tensor:
        """(R, 1) long: each row's position this step."""
        return (self.pos0 + self.step)[:, None]

    def need_slots(self, busy: list[int]) -> int | None:
        """The largest filled length among the busy rows after this step's write (host mirror), or None when a
        busy row is a ring (it reads every slot)."""
        need = 1
        for r in busy:
            h = self.host[r]
            if h.ring:
                return None
            need = max(need, h.held + h.steps + 1)
        return need

    def stepped(self, busy: list[int]) -> None:
        """A decode step ran: every row's step counter moves on (the busy rows' host mirror too)."""
        for r in busy:
            self.host[r].steps += 1
        self.step += 1

    def draw(self, logits: torch.Tensor, hi: int) -> None:
        """After the step over rows ``[0, hi)``: draw each row's next token from ``logits`` (hi, V) at its next
        noise step, store it, and set ``done`` on EOS or ``max_new``."""
        new = pick_rows(logits, self.sampling().rows(0, hi), self.keys[:hi], self.step[:hi])
        if hi < self.rows:  # rows [hi, R) hold no sample: their token is never read
            new = torch.cat([new, self.tok[hi:]])
        where = torch.where(self.done, self.width, self.step.clamp(max=self.width))
        self.out.scatter_(1, where[:, None], new[:, None])
        self.tok = new
        self.done |= torch.isin(new, self.eos) | (self.step + 1 >= self.max_new)
