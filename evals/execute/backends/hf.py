"""``backend=hf``: transformers ``generate`` under the compression core, with chat templates and batching."""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import torch

from evals.config.models import load_model
from evals.execute.backends.base import Request, Sample
from evals.execute.backends.tokenizing import TokenizingBackend, cut_at_stop, eos_ids
from snapstream_core import attach
from snapstream_core.engine import Engine, EngineItem, Finished, item_key
from snapstream_core.engine.loop import MIN_CPU_ROWS
from snapstream_core.engine.step import resolve_compile
from snapstream_core.generate import generate
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig
from tasks.base import decode_keeping_think_tags

log = logging.getLogger(__name__)

def positions_advice(prompt_tokens: int, max_new: int, positions: int, model: str) -> str:
    """The warning for a request that passes the model's trained positions, with the fix that applies: a prompt that
    alone fills them is cut (or its items chosen) by the task, since no ``gen.max_new_tokens`` can help; otherwise
    fewer new tokens keep the decode within them."""
    if prompt_tokens >= positions:
        return (f"the prompt alone ({prompt_tokens} tokens) fills the {positions} positions {model} was trained for, "
                "so every generated token is out of distribution and lowering gen.max_new_tokens cannot help: cut "
                "the prompts with the task's length knob (task.max_len, task.context_tokens), choose items with "
                "task.limit or the task's filters, or use a model with a longer context")
    return (f"gen.max_new_tokens={max_new} with a prompt of {prompt_tokens} tokens goes past the {positions} positions "
            f"{model} was trained for: tokens beyond position {positions} are generated out of distribution (lower "
            f"gen.max_new_tokens to {positions - prompt_tokens} or less, or cut the prompts)")


class HFBackend(TokenizingBackend):
    name = "hf"
    loads_weights = True
    replays = False
    engine = True
    needs_prompts = True
    supports_followup = True
    streams = True
    batch_size = None  # the run's gen.batch_size

    def __init__(
        self,
        model_cfg: Any,
        method: CompressionMethod,
        sampling: SamplingConfig,
        compile: bool | str = "auto",
        rows: int = MIN_CPU_ROWS,
        requested: int | str | None = None,
        seed: int = 0,
        planned_bytes: int | None = None,
    ):
        self.model_cfg = model_cfg
        self.rows = rows  # decode rows (evals.plan.job.choose_rows)
        self.requested = rows if requested is None else requested  # gen.rows as meta.json reports it
        self.seed = int(seed)
        self.planned_bytes = planned_bytes
        self.engine: Engine | None = None  # one per backend: every request of the run, follow-ups included
        self.reserved: tuple[int, int] | None = None  # (prompt tokens, new tokens) the rows hold (reserve)
        self.engines = 0
        self._watch: Callable[[int, int], None] | None = None  # the run's progress line (watch)
        self.method = method
        self.sampling = sampling
        self.compile = compile
        self.compile_meta: dict[str, Any] = {}
        self.model, self.tokenizer = load_model(model_cfg)
        attach(self.model)
        self.eos = eos_ids(self.model.generation_config, self.tokenizer)
        self.pad = self.tokenizer.pad_token_id
        self._warned_positions = False

    def _check_positions(self, prompt_tokens: int, max_new: int) -> None:
        """Warn once per backend when ``prompt + max_new_tokens`` passes the model's trained positions
        (``max_position_embeddings``): decoding goes on with positions the model never saw, for a long time."""
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions is None or prompt_tokens + max_new <= positions or self._warned_positions:
            return
        self._warned_positions = True
        log.warning(positions_advice(prompt_tokens, max_new, positions, str(self.model_cfg.name)))

    def watch(self, callback: Callable[[int, int], None] | None) -> None:
        """``callback(prompt tokens prefilled, tokens decoded)`` after each prefill and run of decode steps of the
        engine (counts since the backend was built; the eager path of ``positions=in_cache`` reports nothing)."""
        self._watch = callback
        if self.engine is not None:
            self.engine.on_progress = callback

    def meta(self) -> dict[str, Any]:
        """For ``meta.json``: ``decode_compile`` = the ``gen.compile`` value, whether decode ran compiled, the first
        step's wall time (the compile time) and the graph recording's; ``decode_rows``: ``gen.rows``, the rows used,
        decode steps, row-steps, the share of row-steps spent on rows that held no live sample, prefills run, K/V
        row allocations made, ``engines`` built and ``compiles`` (graphs compiled; 1 each for a whole run, follow-up
        calls included, when the shapes hold) and the share of the rows' slots the steps read."""
        e = None if self.engine is None else self.engine.stats
        compile_meta = dict(self.compile_meta)
        if e is not None:
            compile_meta.update(compiled=e.compiled, first_step_s=round(e.first_step_s, 3),
                                record_s=round(e.record_s, 3))
        c = e.counts if e is not None else None
        steps, row_steps, used = (c.steps, c.row_steps, c.used) if c is not None else (0, 0, 0)
        rows = {"gen.rows": self.requested, "steps": steps, "row_steps": row_steps, "used_row_steps": used,
                "rows": None if self.engine is None else self.engine.rows,
                "prefills": e.prefills if e else 0, "kv_allocations": e.kv_allocations if e else 0,
                "engines": self.engines, "compiles": e.compiles if e else 0,
                "wasted_share": round((row_steps - used) / row_steps, 4) if row_steps else 0,
                "read_share": round(e.read_share, 4) if e else 0}
        return {"decode_compile": {"gen.compile": self.compile, **compile_meta}, "decode_rows": rows}

    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        """One list of samples per request, in the order of ``request.sample_idx`` (collects :meth:`stream`)."""
        index = {id(r): i for i, r in enumerate(requests)}
        results: list[dict[int, Sample]] = [{} for _ in requests]
        for ended in self.stream(requests):
            for req, sample in ended:
                results[index[id(req)]][sample.sample_idx] = sample
        return [[got[i] for i in req.sample_idx] for req, got in zip(requests, results)]

    def stream(self, requests: Iterable[Request]) -> Iterator[list[tuple[Request, Sample]]]:
        """Generate every sample of ``requests`` (read lazily, in order); yields the samples that ended, as
        ``(request, sample)`` lists, as soon as they end.

        One :class:`~snapstream_core.engine.Engine` serves every call of the backend (its rows refill across
        items, and each request brings its own settings), its rows sized once by :meth:`reserve` when the runner
        knows the run's bound (second calls included), else by the first call's prompts; so a run allocates its rows
        and compiles its decode step once, follow-up calls included. Each sample draws from noise keyed on
        (``gen.seed``, item id, sample index, step), so its tokens do not depend on batching, ``gen.rows`` or
        resume. ``positions=in_cache`` (keys re-rotated every step,
        which the fixed slot rows cannot do) goes to ``generate()``'s eager path, with the global RNG seeded per
        item as before."""
        if self.method.positions == "in_cache":
            for req in requests:
                yield list(zip(itertools.repeat(req), self._generate_eager(req, self._settings(req))))
            return
        yield from self._stream_engine(requests)

    def _settings(self, req: Request) -> tuple:
        """(sampling, stop strings) of a request: the task's per-request settings over the run's ``gen.*``."""
        gen = dict(req.prompt.gen or {})
        gen.pop("max_new_tokens", None)
        max_new = req.new_tokens(self.sampling.max_new_tokens)
        return replace(self.sampling, max_new_tokens=max_new, **gen), tuple(req.prompt.stop)

    def reserve(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Size the engine's rows once for the run: prompts of at most ``prompt_tokens`` tokens, at most
        ``max_new_tokens`` new tokens (the runner's :func:`tasks.protocol.call_extent`, second calls included). Every
        later call passes ``max_prompt_tokens`` to :meth:`Engine.run`, which refuses a longer prompt or a wider
        request in one line instead of allocating the rows again. Called before the first request."""
        if self.engine is not None and self.reserved != (prompt_tokens, max_new_tokens):
            raise RuntimeError("HFBackend.reserve: the engine's rows are already sized; reserve before generating")
        self.reserved = (int(prompt_tokens), int(max_new_tokens))

    def _engine(self) -> Engine:
        """The backend's one engine, built at its first request; with :meth:`reserve`'s bound, its default
        settings carry the reserved new tokens (the rows' width: ``Engine.plan_slots`` with ``max_prompt_tokens``)."""
        if self.engine is None:
            sampling = self.sampling if self.reserved is None else replace(self.sampling,
                                                                            max_new_tokens=self.reserved[1])
            self.engine = Engine(
                self.model, self.method, sampling, eos=self.eos, rows=self.rows, seed=self.seed,
                tokenizer=self.tokenizer, compile=resolve_compile(self.compile, self.model.device),
                planned_bytes=self.planned_bytes,
            )
            self.engines += 1
        self.engine.on_progress = self._watch
        return self.engine

    def _stream_engine(self, requests: Iterable[Request]) -> Iterator[list[tuple[Request, Sample]]]:
        items = []  # every prompt encoded before decoding: their lengths size the rows (unless reserved)
        for req in requests:
            sampling, stop = self._settings(req)
            ids = self.encode(req.prompt)
            self._check_positions(len(ids), sampling.max_new_tokens)
            key = item_key(str(getattr(req.item, "item_id", "")))
            items.append(EngineItem(ids, key, tuple(req.sample_idx), sampling.max_new_tokens, tag=req,
                                    sampling=sampling, stop=stop))
        engine = self._engine()
        bound = None if self.reserved is None else self.reserved[0]
        for ended in engine.run(items, max_prompt_tokens=bound):
            yield [(f.item.tag, self._sample(f, engine)) for f in ended]

    def _sample(self, f: Finished, engine: Engine) -> Sample:
        stop = f.item.stop or ()
        return Sample(
            sample_idx=f.sample_idx,
            completion=cut_at_stop(decode_keeping_think_tags(self.tokenizer, f.tokens), stop),
            prompt_tokens=len(f.item.ids),
            gen_tokens=len(f.tokens),
            finish_reason=f.finish_reason,
            latency_s=f.prefill_s / max(len(f.item.sample_idx), 1) + f.decode_s,
            kv=dict(f.kv),
            measured={"prefill_s": f.prefill_s, "decode_s": f.decode_s,
                      "sampling_warpers": f.item.sampling.warper_names(), "decode_compiled": engine.stats.compiled},
            token_ids=list(f.tokens),
        )

    def _generate_eager(self, req: Request, settings: tuple) -> list[Sample]:
        """``generate()`` for one request (``positions=in_cache``), the global RNG seeded by (seed, item)."""
        sampling, stop = settings
        sampling = replace(sampling, n=len(req.sample_idx))
        ids = self.encode(req.prompt)
        self._check_positions(len(ids), sampling.max_new_tokens)
        torch.manual_seed(legacy_seed(self.seed, str(getattr(req.item, "item_id", ""))))
        start = time.perf_counter()
        out = generate(self.model, [ids], self.method, sampling, eos_token_ids=self.eos, pad_token_id=self.pad,
                       stop_strings=stop, tokenizer=self.tokenizer)
        self.compile_meta.setdefault("compiled", False)
        per_row = (time.perf_counter() - start) / len(req.sample_idx)
        measured = {"prefill_s": out.prefill_s, "decode_s": out.decode_s,
                    "sampling_warpers": sampling.warper_names(), "decode_compiled": False}
        return [
            Sample(sample_idx=idx, completion=cut_at_stop(decode_keeping_think_tags(self.tokenizer, t), stop),
                   prompt_tokens=len(ids), gen_tokens=len(t), finish_reason=reason, latency_s=per_row,
                   kv=dict(out.stats), measured=dict(measured), token_ids=list(t))
            for idx, t, reason in zip(req.sample_idx, out.tokens[0], out.finish_reasons[0])
        ]


def legacy_seed(seed: int, key: str) -> int:
    """The global-RNG seed of the eager path (``positions=in_cache``) for one item."""
    return (seed * 1_000_003 + zlib.crc32(key.encode())) % (2**31)
