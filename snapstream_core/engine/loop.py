"""The decode engine: each item prefilled once, its samples decoded in a fixed set of rows that retire and refill.

``Engine.run(items)`` pulls items lazily from an iterable. For each item it calls
:func:`~snapstream_core.prefill.prefill_prompt` once (a compressed batch-1 cache and the last logits) and queues the
item's samples; a free row copies the item's compressed prefix, draws its first token from the prefill logits, and
decodes. Every ``check_every`` steps the host reads the rows' ``done`` flags (set on the device: EOS or
``max_new_tokens``; stop strings are checked on the host then) and yields the samples that ended, whose rows take the
next pending samples, of the same item or the next one.

Sampling draws from counter-based noise keyed on (``seed``, item key, sample index, step) (:mod:`.noise`), so a
sample's tokens do not depend on which rows, items or resumes surround it. On CPU the step runs each busy row as its
own batch-1 forward over its own slots (``per_row``): the CPU matrix kernels give different last bits for different
batch sizes (measured: row 0 of a (M, 576) x (576, N) float32 product differs between M = 1, 2-3 and 4+), so
this keeps a sample's logits bit-identical whatever the row count. On CUDA all rows go through one fixed-shape step,
compiled when ``compile`` is on (a failed compile warns once and continues eager with the same tokens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from snapstream_core.cache import CompressedCache
from snapstream_core.engine.attention import resolve_attention
from snapstream_core.engine.noise import pick_tokens, sample_key
from snapstream_core.engine.rows import RowCache, row_slots
from snapstream_core.engine.scheduler import Job, Scheduler, StepCounts
from snapstream_core.generate import _cut, _stop_cut
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.prefill import prefill_prompt
from snapstream_core.sampling import SamplingConfig
from snapstream_core.static_decode import slot_forward

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineItem:
    """One prompt and the samples wanted of it. ``key``: the item's noise key (``noise.item_key(item_id)``);
    ``tag``: anything the caller wants back with each finished sample."""

    ids: Sequence[int]
    key: int
    sample_idx: tuple[int, ...]
    max_new_tokens: int
    tag: Any = None


@dataclass
class Finished:
    """A sample that ended: its new tokens (cut after EOS or the stop string's last token), ``stop`` or ``length``,
    the KV figures of its cache and its timings."""

    item: EngineItem
    sample_idx: int
    tokens: list[int]
    finish_reason: str
    kv: dict[str, int]
    prefill_s: float
    decode_s: float


@dataclass
class EngineStats:
    """What ``meta.json`` records of a run's decoding."""

    counts: StepCounts = field(default_factory=StepCounts)
    compiled: bool = False  # first_step_s: the first compiled step's wall time (0 when eager)
    compile_error: str | None = None
    first_step_s: float = 0.0


def decode_step(model, cache: RowCache, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                attention: Callable | None = None):
    """One decode step of fixed shapes: tokens (R, 1) long at positions (R, 1), row r written at slot ``slots[r]``
    -> next-token logits (R, V) float32. ``attention``: the decode attention hook (None: SDPA)."""
    cache.write_slot = slots
    cache.mark_written()
    return slot_forward(model, cache, tokens, positions, attention)


def _one_line(exc: BaseException) -> str:
    """``Type: first line`` of an exception and of the error inside it (dynamo wraps a backend's error)."""
    parts = []
    while exc is not None and len(parts) < 3:
        text = str(exc).strip().splitlines()
        parts.append(f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": "))
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return " <- ".join(parts)


class _Step:
    """The decode step, compiled when asked, with the decode attention ``attention`` (None: SDPA); a compile or
    capture failure warns once and continues eager with SDPA (the same tokens)."""

    def __init__(self, compiled: bool, device_type: str, backend: str, attention: Callable | None,
                 stats: EngineStats):
        self.stats = stats
        self.attention = attention
        self.fn: Callable | None = None
        if compiled:
            mode = "reduce-overhead" if device_type == "cuda" and backend == "inductor" else None
            self.fn = torch.compile(decode_step, backend=backend, mode=mode, fullgraph=True)
        stats.compiled = compiled

    def __call__(self, *args) -> torch.Tensor:
        if self.fn is not None:
            try:
                return self.fn(*args, self.attention)
            except Exception as exc:  # noqa: BLE001 - any compile/capture failure: eager gives the same tokens
                why = _one_line(exc)
                log.warning("gen.compile: compiling the decode step failed (%s); continuing eager", why)
                self.stats.compiled, self.stats.compile_error = False, why
                self.fn = self.attention = None  # FlexAttention unfused is slow: SDPA
        return decode_step(*args, self.attention)


class Engine:
    """Decode many items' samples in ``rows`` fixed rows (see the module docstring).

    Args:
        eos: token ids that end a sample; ``stop_strings`` (needs ``tokenizer``) end it too, checked on the host.
        seed: ``gen.seed``; ``per_row``: run each row as its own batch-1 forward (default: on CPU, eager);
        ``check_every``: decode steps between host reads of the done flags (default 1 per-row, else 16);
        ``attention``: ``auto`` (FlexAttention for a compiled step on CUDA, else SDPA), ``flex`` or ``sdpa``.
    """

    def __init__(
        self,
        model,
        method: CompressionMethod,
        sampling: SamplingConfig,
        *,
        eos: Sequence[int],
        rows: int,
        seed: int = 0,
        stop_strings: Sequence[str] = (),
        tokenizer=None,
        compile: bool = False,
        compile_backend: str = "inductor",
        per_row: bool | None = None,
        check_every: int | None = None,
        attention: str = "auto",
    ):
        if method.positions == "in_cache":
            raise ValueError("gen.rows: the engine does not support compression.positions=in_cache")
        self.stop_strings = [s for s in stop_strings if s]
        if self.stop_strings and tokenizer is None:
            raise ValueError("Engine: stop_strings needs the tokenizer")
        self.model, self.method, self.sampling = model, method, sampling
        self.device = model.device
        self.eos = sorted(set(eos))
        self.eos_t = torch.tensor(self.eos or [-1], dtype=torch.long, device=self.device)
        self.rows, self.seed, self.tokenizer = rows, seed, tokenizer
        self.per_row = (self.device.type == "cpu" and not compile) if per_row is None else per_row
        self.check_every = check_every or (1 if self.per_row else 16)
        self.stats = EngineStats()
        kernel = resolve_attention(attention, self.device.type, compile)
        self.step_fn = _Step(compile, self.device.type, compile_backend, kernel, self.stats)
        self.cache: RowCache | None = None

    # ------------------------------------------------------------------ per-row state
    def _alloc(self, prefix: CompressedCache, slots: int, width: int) -> None:
        """Row buffers and counters, (re)made when a sample needs more slots or tokens than they hold."""
        R, dev = self.rows, self.device
        if self.cache is None:
            self.cache = RowCache.empty(R, slots, prefix)
            z = torch.zeros(R, dtype=torch.long, device=dev)
            self.base, self.offset, self.period = z.clone(), z.clone(), torch.ones_like(z)
            self.pos0, self.step, self.keys, self.max_new = z.clone(), z.clone(), z.clone(), z.clone()
            self.tok = z.clone()
            self.done = torch.ones(R, dtype=torch.bool, device=dev)
            self.out = torch.zeros(R, width + 1, dtype=torch.long, device=dev)  # last column: writes of done rows
        elif slots > self.cache.slots:
            self.cache = self.cache.grown(max(slots, self.cache.slots * 5 // 4))
        if width + 1 > self.out.shape[1]:
            wider = self.out.new_zeros(R, width + 1)
            wider[:, : self.out.shape[1] - 1] = self.out[:, :-1]
            self.out = wider

    def _start(self, row: int, job: Job, item: EngineItem, prefix: CompressedCache, logits: torch.Tensor) -> None:
        """Put sample ``job`` in ``row``: copy the prefix, draw the first token (noise step 0)."""
        slots = row_slots(prefix, job.max_new_tokens)
        self._alloc(prefix, slots, job.max_new_tokens)
        base, offset, period, _ = self.cache.load(row, prefix)
        key = sample_key(self.seed, item.key, job.sample_idx)
        for t, v in ((self.base, base), (self.offset, offset), (self.period, period), (self.pos0, len(item.ids)),
                     (self.step, 0), (self.keys, key), (self.max_new, job.max_new_tokens)):
            t[row] = v
        first = pick_tokens(logits, self.sampling, self.keys[row : row + 1], self.step[row : row + 1])
        self.tok[row] = first[0]
        self.out[row, 0] = first[0]
        self.done[row] = torch.isin(first, self.eos_t)[0] | (job.max_new_tokens <= 1)
        self._row_slots[row] = slots
        self._row_start[row] = time.perf_counter()

    # ------------------------------------------------------------------ one step
    def _decode(self, busy: list[int]) -> None:
        """One decode step of every row (or, per-row, of each busy row)."""
        S = self.cache.slots
        slots = (self.base + (self.offset + self.step) % self.period).clamp(max=S - 1)
        positions = (self.pos0 + self.step)[:, None]
        start = time.perf_counter()
        if self.per_row:
            logits = None
            for r in busy:
                n = self._row_slots[r]
                lr = self.step_fn(self.model, self.cache.view(r, n), self.tok[r : r + 1, None],
                                  positions[r : r + 1], slots[r : r + 1].clamp(max=n - 1))
                if logits is None:
                    logits = lr.new_zeros(self.rows, lr.shape[-1])
                logits[r] = lr[0]
            self._sched.stepped(len(busy))
        else:
            logits = self.step_fn(self.model, self.cache, self.tok[:, None], positions, slots)
            self._sched.stepped()
        if self._sched.counts.steps == 1 and self.stats.compiled:  # the compile time
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.stats.first_step_s = time.perf_counter() - start
        self.step += 1
        new = pick_tokens(logits, self.sampling, self.keys, self.step)
        width = self.out.shape[1] - 1
        where = torch.where(self.done, width, self.step.clamp(max=width))
        self.out.scatter_(1, where[:, None], new[:, None])
        self.tok = new
        self.done |= torch.isin(new, self.eos_t) | (self.step + 1 >= self.max_new)

    # ------------------------------------------------------------------ host side
    def _stop_hit(self, seq: list[int]) -> bool:
        """Whether the tail of ``seq`` holds a stop string (a trigger: the exact cut is found at retirement)."""
        tail = seq[-(self.check_every + 64) :]
        text = self.tokenizer.decode(tail, skip_special_tokens=True)
        return any(s in text for s in self.stop_strings)

    def _harvest(self, sched: Scheduler, items: list[EngineItem], prefill_s: dict[int, float],
                 kv: dict[int, dict[str, int]]) -> list[Finished]:
        """Read the done flags and the rows' tokens (the host synchronisation); retire the rows that ended."""
        busy = sched.busy_rows()
        if not busy:
            return []
        done = self.done.tolist()
        steps = self.step.tolist()
        read = busy if self.stop_strings else [r for r in busy if done[r]]  # rows whose tokens the host needs
        seqs = dict(zip(read, self.out[read].tolist())) if read else {}
        finished = []
        for row in read:
            job = sched.running[row]
            seq = seqs[row][: min(steps[row] + 1, job.max_new_tokens)]
            if not done[row] and not self._stop_hit(seq):
                continue
            cut, reason = _cut(seq, set(self.eos), job.max_new_tokens)
            at = _stop_cut(cut, self.stop_strings, self.tokenizer) if self.stop_strings else None
            if at is not None:
                cut, reason = cut[:at], "stop"
            elif not done[row]:
                continue  # the tail trigger saw a stop string the exact search does not: decode on
            self.done[row] = True
            sched.retire(row, kept_steps=len(cut) - 1)
            item = items[job.item]
            finished.append(Finished(
                item=item, sample_idx=job.sample_idx, tokens=cut, finish_reason=reason,
                kv=self._kv_figures(kv[job.item], row, len(cut)),
                prefill_s=prefill_s[job.item], decode_s=time.perf_counter() - self._row_start[row],
            ))
        return finished

    def _kv_figures(self, prefix_kv: dict[str, int], row: int, n_tokens: int) -> dict[str, int]:
        """The prefix cache's figures, with the decode row's: its slots (bytes, preallocated as the static path
        does) and the tokens it held at the end."""
        per_slot = self.cache.nbytes_per_row() // self.cache.slots
        layer = self._prefix_layout[row]
        held = layer[0] + n_tokens - 1 if layer[1] is None else min(layer[0] + n_tokens - 1, layer[1])
        row_bytes = per_slot * self._row_slots[row]
        return {**prefix_kv, "kv_tokens_peak": max(prefix_kv["kv_tokens_peak"], held),
                "kv_bytes_peak": max(prefix_kv["kv_bytes_peak"], row_bytes), "kv_bytes_final": row_bytes}

    # ------------------------------------------------------------------ the loop
    @torch.no_grad()
    def run(self, items: Iterable[EngineItem]) -> Iterator[list[Finished]]:
        """Decode every sample of ``items`` (pulled lazily, in order); yields the samples that ended, a list per host
        read, in the order they ended."""
        source = iter(items)
        sched = Scheduler(self.rows)
        sched.counts = self.stats.counts
        self._sched = sched
        seen: list[EngineItem] = []
        prefixes: dict[int, tuple[CompressedCache, torch.Tensor]] = {}
        prefill_s: dict[int, float] = {}
        kv: dict[int, dict[str, int]] = {}
        self._row_slots = [0] * self.rows
        self._row_start = [0.0] * self.rows
        self._prefix_layout: list[tuple[int, int | None]] = [(0, None)] * self.rows

        def pull() -> bool:
            item = next(source, None)
            if item is None:
                return False
            seen.append(item)
            sched.add(Job(len(seen) - 1, s, item.max_new_tokens) for s in item.sample_idx)
            return True

        while True:
            started = False
            while sched.free_rows():
                if not sched.pending and not pull():
                    break
                for row, job in sched.assign():
                    if job.item not in prefixes:
                        start = time.perf_counter()
                        ids = torch.tensor([list(seen[job.item].ids)], dtype=torch.long, device=self.device)
                        prefixes[job.item] = prefill_prompt(self.model, ids, self.method)
                        prefill_s[job.item] = time.perf_counter() - start
                        kv[job.item] = prefixes[job.item][0].stats.as_row()
                    prefix, logits = prefixes[job.item]
                    self._start(row, job, seen[job.item], prefix, logits)
                    started = True
                    first = prefix.layers[0]
                    held = first.keys.shape[-2] if first.ring is None else first._slots_now()
                    self._prefix_layout[row] = (held, None if first.ring is None else first.n_frozen + first.ring)
                    if not sched.item_still_needed(job.item):
                        del prefixes[job.item]  # its rows hold copies; the batch-1 cache is freed
            if sched.done:
                return
            if started:  # samples that end at their first token free their rows before any step
                ended = self._harvest(sched, seen, prefill_s, kv)
                if ended:
                    yield ended
                    continue
            for _ in range(self.check_every):
                self._decode(sched.busy_rows())
            ended = self._harvest(sched, seen, prefill_s, kv)
            if ended:
                yield ended
