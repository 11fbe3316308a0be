"""The decode engine: each item prefilled once, its samples decoded in a fixed set of rows that retire and refill.

``Engine.run(items)`` reads the items (their prompt lengths size the rows once, before any prefill: one K/V
allocation, ``CompressionMethod.slots`` of the longest prompt, kept by the engine's later runs that fit it; a caller
that plans ahead passes ``max_prompt_tokens`` instead and a longer prompt is refused in one line). Each item brings
its own settings (temperature, top-k, top-p, ``max_new_tokens``, stop strings, seed), so one engine and one compiled
step serve a whole run, follow-up calls included; the per-row arrays live in one object (:mod:`.batch`).

For each item the engine calls :func:`~snapstream_core.prefill.prefill_prompt` once (a compressed batch-1 cache and
the last logits) and queues the item's samples; a free row copies the item's compressed prefix, draws its first
token from the prefill logits, and decodes. Every ``check_every`` steps the host reads the rows' ``done`` flags (set
on the device: EOS or ``max_new_tokens``; stop strings are checked on the host then) and yields the samples that
ended, whose rows take the next pending samples, of the same item or the next one. ``run`` is written on the step
API, which a measurement drives one call at a time: :meth:`Engine.start`, :meth:`Engine.fill` (free rows take the
next samples), :meth:`Engine.step` (one decode step, the due rows' compaction included), :meth:`Engine.harvest`
(the host read).

Sampling draws from counter-based noise keyed on (``seed``, item key, sample index, step) (:mod:`.noise`), so a
sample's tokens do not depend on which rows, items or resumes surround it. Nothing between two host reads of the done
flags reads the device back, whatever the settings.

One decode step (:mod:`.step`) serves every device. Compiled, or on CUDA, it runs all rows at fixed shapes. Eager on
CPU it runs the rows ``[0, hi)`` that cover the busy ones as forwards over fixed blocks of rows
(:mod:`.row_blocks`): row ``r`` always sits at position ``r % B`` of a forward of ``MIN_CPU_ROWS`` to ``B`` rows,
``B`` probed on this machine for the model's matrix shapes, so that the CPU matrix kernels give a row the same bits
whatever its neighbours (1 to 3 rows take other kernels; how many rows agree depends on the processor), and a
sample's logits do not depend on its neighbours.

Reads are bounded to the filled slots for the appending methods (docs/engine.md gives the rule and the share read).
The eager step reads only the first ``read_slots`` slots of every row: the largest filled length among the busy rows,
rounded up to ``read_block`` slots (host counters). With FlexAttention (the compiled step on CUDA) each row reads its
own filled slots, rounded up to ``READ_BLOCK``: the engine keeps ``fill`` (rows,) on the device, each row's highest
written slot + 1 (all S for a ring), and the attention builds a block mask from it (no host synchronisation).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch

from snapstream_core.cache import CompressedCache
from snapstream_core.engine.attention import fill_blocks, flex_decode_attention, resolve_attention
from snapstream_core.engine.batch import RowBatch
from snapstream_core.engine.compact import Compactor, compactor_for
from snapstream_core.engine.items import EngineItem, EngineStats, Finished
from snapstream_core.engine.noise import sample_key
from snapstream_core.engine.queue import RunQueue
from snapstream_core.engine.row_blocks import MIN_CPU_ROWS, blocks, held_rows, row_block
from snapstream_core.engine.row_caches import row_cache_class
from snapstream_core.engine.rows import RowCache
from snapstream_core.engine.scheduler import Scheduler, Ticket
from snapstream_core.engine.step import DecodeKernels, EngineError, Step, is_oom, memory_line
from snapstream_core.engine.timer import DeviceTimer
from snapstream_core.generate import cut_at_eos, stop_cut
from snapstream_core.memory import READ_BLOCK
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.prefill import prefill_prompt
from snapstream_core.sampling import SamplingConfig

log = logging.getLogger(__name__)
__all__ = ["MIN_CPU_ROWS", "Engine", "EngineItem", "EngineStats", "Finished"]


class Engine:
    """Decode many items' samples in ``rows`` fixed rows (see the module docstring); one engine serves every run
    of a process whose rows fit the first run's (each request brings its own settings).

    Args:
        sampling: the settings of a request that brings none (its ``max_new_tokens`` sizes the rows of a run with
        no items); eos: token ids that end a sample; ``stop_strings`` (needs ``tokenizer``) end it too, checked on
        the host; seed: ``gen.seed``; ``check_every``: decode steps between host reads of the done flags (default 1
        on CPU, else 16); ``attention``: ``auto`` (FlexAttention for a compiled step on CUDA, else SDPA), ``flex``
        or ``sdpa``; ``kernels``: device pieces plugged into the step (:class:`~.step.DecodeKernels`);
        ``read_block``: the eager step's read bound of the appending methods is rounded up to this many slots (None:
        no bound; default ``READ_BLOCK`` eager, None compiled: one graph shape, where FlexAttention bounds each
        row's reads instead); ``planned_bytes``: the planner's peak, quoted by an out-of-memory error;
        ``step_context``: a context manager factory entered around each run of decode steps between host reads
        (a measurement's hook: ``bench.gpu_check`` counts host reads there). ``on_progress`` (an attribute, None by
        default): called as ``on_progress(stats.prefilled, stats.decoded)`` after each prefill and each run of
        decode steps, so a caller's progress line moves while a batch decodes; it changes no output.
        ``row_blocks``: False runs every step as one forward over exactly ``rows`` rows, even below
        ``MIN_CPU_ROWS`` (a measurement of a batch of ``rows``; a sample's CPU bits may then depend on its
        neighbours); ``step``: a :class:`~.step.Step` to decode with, shared with other engines (its compiled graphs
        with it; None: the engine's own).

    The step API: :meth:`start` a run, then :meth:`fill` (free rows take the next samples, prefilled as needed),
    :meth:`step` (one decode step of the busy rows, their compaction included; no host read) and :meth:`harvest`
    (the host read: the samples that ended) until :attr:`done`; :meth:`run` is that loop.
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
        check_every: int | None = None,
        attention: str = "auto",
        kernels: DecodeKernels | None = None,
        read_block: int | None | str = "auto",
        planned_bytes: int | None = None,
        step_context: Callable[[], AbstractContextManager] | None = None,
        row_blocks: bool = True,
        step: Step | None = None,
    ):
        if method.positions == "in_cache":
            raise ValueError("gen.rows: the engine does not support compression.positions=in_cache")
        if rows < 1:
            raise ValueError(f"gen.rows: must be >= 1, got {rows}")
        self.stop_strings = tuple(s for s in stop_strings if s)
        if self.stop_strings and tokenizer is None:
            raise ValueError("Engine: stop_strings needs the tokenizer")
        self.model, self.method, self.sampling = model, method, sampling
        self.device = model.device
        self.eos = sorted(set(eos))
        self.eos_t = torch.tensor(self.eos or [-1], dtype=torch.long, device=self.device)
        self.rows, self.seed, self.tokenizer = rows, seed, tokenizer
        self.cpu = self.device.type == "cpu"
        if row_blocks:
            self.row_block = row_block(model, max(rows, MIN_CPU_ROWS)) if self.cpu and not compile else None
            self.held_rows = (held_rows(rows, self.row_block) if self.row_block else
                              max(rows, MIN_CPU_ROWS) if self.cpu else rows)  # rows of K/V the engine allocates
        else:
            self.row_block, self.held_rows = None, rows
        self.row_blocks = row_blocks
        self.check_every = check_every or (1 if self.cpu else 16)
        self.read_block = (None if compile else READ_BLOCK) if read_block == "auto" else read_block
        self.kernels, self.planned_bytes, self.step_context = kernels, planned_bytes, step_context
        self.stats = EngineStats()
        kernel = resolve_attention(attention, self.device.type, compile)
        self.step_fn = step or Step(compile, self.device.type, compile_backend, kernel, kernels)
        self.bounded = self.step_fn.attention is flex_decode_attention  # per-row read bounds (fill)
        self.stats.compiled = compile
        self.compile_backend = compile_backend
        self.cache: RowCache | None = None
        self.batch: RowBatch | None = None
        self.compactor: Compactor | None = None
        self._compaction_timer = DeviceTimer(self.device)
        self.queue: RunQueue | None = None  # the run under way (start)
        self.on_progress: Callable[[int, int], None] | None = None

    # ------------------------------------------------------------------ per-row state
    def _alloc(self, prefix: CompressedCache, slots: int, width: int) -> None:
        """The rows' K/V buffers and per-row arrays: allocated at the first prefix (its head count, dtype and
        device), with the run's ``slots`` and token ``width``; kept by later runs that fit them."""
        if self.batch is not None and self.batch.fits(slots, width):
            return
        self.cache = self.batch = None
        try:
            rows_class = row_cache_class(self.method.kv_format)
            self.cache = rows_class.empty(self.held_rows, slots, prefix,
                                          None if self.kernels is None else self.kernels.zeros)
        except Exception as exc:
            if is_oom(exc):
                raise self._oom("allocating the decode rows", exc) from exc
            raise
        self.stats.kv_allocations += 1
        self.batch = RowBatch(self.held_rows, slots, width, self.eos_t, self.sampling)
        self.compactor = compactor_for(self.method, self.cache, self.batch, self.model, self.stats.compiled,
                                       self.compile_backend)

    def _oom(self, stage: str, exc: BaseException) -> EngineError:
        held = 0 if self.cache is None else self.cache.nbytes_per_row() * self.cache.rows
        return EngineError(f"{stage}: out of memory ({memory_line(self.device, held, self.planned_bytes)}); "
                           "lower gen.rows or plan.memory_gib")

    def _start(self, row: int, ticket: Ticket, item: EngineItem, prefix: CompressedCache,
               logits: torch.Tensor) -> None:
        """Put sample ``ticket`` in ``row``: copy the prefix, add the request to the row's arrays (its first token;
        a compacting method's slot positions and query ring)."""
        seed = self.seed if item.seed is None else item.seed
        schedule = self.cache.load(row, prefix)
        self.batch.add(row, schedule, len(item.ids), sample_key(seed, item.key, ticket.sample_idx),
                       ticket.max_new_tokens, item.sampling or self.sampling, self._stop(item), logits, prefix)

    def _stop(self, item: EngineItem) -> tuple[str, ...]:
        return self.stop_strings if item.stop is None else tuple(s for s in item.stop if s)

    # ------------------------------------------------------------------ one step
    def _read_slots(self, busy: list[int]) -> int:
        """Slots the step reads: every slot, or for the appending methods the largest filled length among the busy
        rows after this step's write, rounded up to ``read_block`` (host counters: no synchronisation). Rows that
        hold no sample write at the bound's last slot of their own row."""
        S = self.cache.slots
        need = None if self.read_block is None else self.batch.need_slots(busy)
        return S if need is None else min(S, -(-need // self.read_block) * self.read_block)

    def _decode(self, busy: list[int]) -> None:
        """One decode step of the rows (on CPU: of rows ``[0, hi)``, ``hi >= MIN_CPU_ROWS``, covering ``busy``)."""
        R, S, b = self.held_rows, self.cache.slots, self.batch
        hi = R  # compiled, CUDA or without row blocks: every row, one shape
        if self.row_block is not None:
            hi = min(R, max(MIN_CPU_ROWS, max(busy, default=0) + 1))
        n = self._read_slots(busy)
        slots = b.slots_now(n)
        filled = b.fill[:hi] if self.bounded else None
        start = time.perf_counter()
        try:
            q, a = b.queries, b.attn_sum  # themselves when every row runs (CUDA graphs keep their addresses)
            if self.row_block is None:
                logits = self.step_fn(self.model, self.cache.view(hi, n), b.tok[:hi, None], b.positions()[:hi],
                                      slots[:hi], filled, q if q is None or hi == R else q[:, :hi],
                                      a if a is None or (hi == R and n == S) else a[:, :hi, :, :n])
            else:  # row r always at position r % row_block of a forward of 4..row_block rows (row_blocks.py)
                parts = blocks(hi, R, self.row_block)
                hi = parts[-1][1]
                pos = b.positions()
                logits = torch.cat([self.step_fn(self.model, self.cache.view(end, n, lo), b.tok[lo:end, None],
                                                 pos[lo:end], slots[lo:end],
                                                 None if filled is None else filled[lo:end],
                                                 None if q is None else q[:, lo:end],
                                                 None if a is None else a[:, lo:end, :, :n])
                                   for lo, end in parts])
        except Exception as exc:
            if is_oom(exc):
                raise self._oom(self.step_fn.stage(), exc) from exc
            raise
        self.queue.sched.stepped(hi)
        self.stats.decoded += len(busy)
        if filled is None:
            self.stats.slots_read += hi * n
        else:  # blocks each row reads, the last one cut at n (added to the stats at the next host read)
            b.reads += (fill_blocks(filled, n).long() * READ_BLOCK).clamp(max=n).sum()
        self.stats.slots_held += hi * S
        if self.stats.compiled and self.step_fn.calls <= 3:  # the compile, then the graph recording
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            if self.step_fn.calls == 1:
                self.stats.first_step_s = time.perf_counter() - start
            else:
                self.stats.record_s += time.perf_counter() - start
        self.stats.compiles = self.step_fn.compiles
        b.stepped(busy)
        if self.compactor is not None:
            self._compact(busy)
        b.draw(logits, hi)

    def _compact(self, busy: list[int]) -> None:
        """Compact the rows this step made due (:class:`~.compact.Compactor`: the rows' K/V and their per-row state,
        slot schedule included)."""
        calls = self.compactor.calls
        self._compaction_timer.start()
        try:
            self.compactor(self.cache, self.batch, busy)
        except Exception as exc:
            if is_oom(exc):
                raise self._oom(self.compactor.stage(), exc) from exc
            raise
        self._compaction_timer.stop(keep=self.compactor.calls > calls)
        self.stats.compactions += self.compactor.calls - calls

    # ------------------------------------------------------------------ host side
    def _stop_hit(self, seq: list[int], stop: tuple[str, ...]) -> bool:
        """Whether the tail of ``seq`` holds a stop string (a trigger: the exact cut is found at retirement)."""
        tail = seq[-(self.check_every + 64) :]
        text = self.tokenizer.decode(tail, skip_special_tokens=True)
        return any(s in text for s in stop)

    def harvest(self) -> list[Finished]:
        """The host read: read the done flags and the rows' tokens, retire the rows that ended, and return their
        samples in row order (a stop string is found here)."""
        q = self.queue
        sched, items = q.sched, q.seen
        busy = sched.busy_rows()
        if not busy:
            return []
        b = self.batch
        done = b.done.tolist()
        steps = b.step.tolist()
        self._fold_reads()
        read = [r for r in busy if done[r] or b.host[r].stop]  # rows whose tokens the host needs
        seqs = dict(zip(read, b.out[read].tolist())) if read else {}
        finished = []
        for row in read:
            ticket, stop = sched.running[row], b.host[row].stop
            seq = seqs[row][: min(steps[row] + 1, ticket.max_new_tokens)]
            if not done[row] and not self._stop_hit(seq, stop):
                continue
            cut, reason = cut_at_eos(seq, set(self.eos), ticket.max_new_tokens)
            at = stop_cut(cut, stop, self.tokenizer) if stop else None
            if at is not None:
                cut, reason = cut[:at], "stop"
            elif not done[row]:
                continue  # the tail trigger saw a stop string the exact search does not: decode on
            b.remove(row)
            sched.retire(row, kept_steps=len(cut) - 1)
            item = items[ticket.item]
            finished.append(Finished(
                item=item, sample_idx=ticket.sample_idx, tokens=cut, finish_reason=reason,
                kv=self._kv_figures(q.kv[ticket.item], item, ticket, len(cut)),
                prefill_s=q.prefill_s[ticket.item], decode_s=time.perf_counter() - b.host[row].started,
            ))
        return finished

    def _report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.stats.prefilled, self.stats.decoded)

    def _fold_reads(self) -> None:
        """Add the device-side slot reads of the bounded steps to the stats (at a host read: no extra wait)."""
        if self.bounded and self.batch is not None:
            self.stats.slots_read += int(self.batch.reads)
            self.batch.reads.zero_()
        self.stats.compaction_s += self._compaction_timer.collect()

    def _kv_figures(self, prefix_kv: dict[str, int], item: EngineItem, ticket: Ticket,
                    n_tokens: int) -> dict[str, int]:
        """The prefix cache's figures, with the sample's own decode row (the method's slots for its prompt, as
        if it decoded alone: a sample's figures do not depend on its neighbours) and the tokens it held."""
        T = len(item.ids)
        held = self.method.peak_tokens(T, n_tokens - 1)
        row_bytes = self.cache.bytes_for(self.method.slots(T, ticket.max_new_tokens))
        return {**prefix_kv, "kv_tokens_peak": max(prefix_kv["kv_tokens_peak"], held),
                "kv_bytes_peak": max(prefix_kv["kv_bytes_peak"], row_bytes), "kv_bytes_final": row_bytes}

    def _prefill(self, item: EngineItem) -> tuple[CompressedCache, torch.Tensor]:
        ids = torch.tensor([list(item.ids)], dtype=torch.long, device=self.device)
        try:
            out = prefill_prompt(self.model, ids, self.method)
        except Exception as exc:
            if is_oom(exc):
                raise self._oom(f"prefill of a {len(item.ids)}-token prompt", exc) from exc
            raise
        self.stats.prefills += 1
        self.stats.prefilled += len(item.ids)
        return out

    def plan_slots(self, items: Sequence[EngineItem], max_prompt_tokens: int | None = None) -> tuple[int, int]:
        """(slots, width) of the run's rows: the method's slots of the longest prompt (``max_prompt_tokens`` when
        the caller planned it, else that of ``items``) at the largest ``max_new_tokens``."""
        width = max((it.max_new_tokens for it in items), default=self.sampling.max_new_tokens)
        if max_prompt_tokens is None:
            max_prompt_tokens = max((len(it.ids) for it in items), default=1)
        return self.method.slots(max_prompt_tokens, width), width

    # ------------------------------------------------------------------ the step API
    def start(self, items: Iterable[EngineItem], *, max_prompt_tokens: int | None = None) -> None:
        """Begin a run of ``items``. Without ``max_prompt_tokens`` the items are read now (their lengths size the
        rows); with it they are pulled lazily and a longer prompt stops the run with one line."""
        if max_prompt_tokens is None:
            items = list(items)
            slots, width = self.plan_slots(items)
        else:
            slots, width = self.plan_slots([], max_prompt_tokens)
        sched = Scheduler(self.rows)
        sched.counts = self.stats.counts
        self.queue = RunQueue(iter(items), sched, slots, width, max_prompt_tokens)

    def fill(self) -> bool:
        """Give every free row the next pending sample, pulling items and prefilling their prompts as needed (the
        rows are allocated at the run's first prefix unless earlier ones fit). Returns whether a sample started."""
        q = self.queue
        sched, started = q.sched, False
        while sched.free_rows():
            if not sched.pending and not q.pull(self._stop, self.tokenizer is not None):
                break
            for row, ticket in sched.assign():
                if ticket.item not in q.prefixes:
                    start = time.perf_counter()
                    q.prefixes[ticket.item] = self._prefill(q.seen[ticket.item])
                    q.prefill_s[ticket.item] = time.perf_counter() - start
                    q.kv[ticket.item] = q.prefixes[ticket.item][0].stats.as_row()
                    self._report()
                    if not q.sized:
                        self._alloc(q.prefixes[ticket.item][0], q.slots, q.width)
                        q.sized = True
                prefix, logits = q.prefixes[ticket.item]
                self._start(row, ticket, q.seen[ticket.item], prefix, logits)
                started = True
            q.free_started()
        return started

    def step(self) -> None:
        """One decode step of the busy rows: the step, the compaction of the rows it makes due, the next tokens
        drawn (on the device; nothing is read back)."""
        self._decode(self.queue.sched.busy_rows())

    @property
    def done(self) -> bool:
        """Whether the run has no sample left, pending or in a row."""
        return self.queue.sched.done

    def busy_rows(self) -> list[int]:
        """The rows that hold a sample of the run."""
        return self.queue.sched.busy_rows()

    def held_entries(self) -> torch.Tensor:
        """(L, R, H_kv) long: the entries each row holds per layer and KV head, its visible slots (a device read:
        for tests and measurements)."""
        return self.cache.visible.sum(-1)

    # ------------------------------------------------------------------ the loop
    @torch.no_grad()
    def run(self, items: Iterable[EngineItem], *, max_prompt_tokens: int | None = None) -> Iterator[list[Finished]]:
        """Decode every sample of ``items``; yields the samples that ended, a list per host read, in the order they
        ended (see :meth:`start` for ``max_prompt_tokens``). The step API's loop: fill the free rows, run
        ``check_every`` steps, harvest."""
        self.start(items, max_prompt_tokens=max_prompt_tokens)
        while True:
            started = self.fill()
            if self.done:
                self._fold_reads()
                return
            if started:  # samples that end at their first token free their rows before any step
                ended = self.harvest()
                if ended:
                    yield ended
                    continue
            start = time.perf_counter()
            with self.step_context() if self.step_context is not None else nullcontext():
                for _ in range(self.check_every):
                    self.step()
            ended = self.harvest()
            self.stats.blocks.append((self.check_every, time.perf_counter() - start))
            self._report()
            if ended:
                yield ended
