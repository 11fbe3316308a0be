"""``backend=hf``: transformers ``generate`` under the compression core, with chat templates and batching."""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import torch

from evals.backends.base import Request, Sample, check_rows
from evals.models import load_model
from evals.prompts import prompt_record
from snapstream_core import attach
from snapstream_core.engine import Engine, EngineItem, Finished, item_key
from snapstream_core.engine.loop import MIN_CPU_ROWS
from snapstream_core.engine.step import resolve_compile
from snapstream_core.generate import generate
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig
from tasks.base import Prompt, decode_keeping_think_tags

log = logging.getLogger(__name__)

# End-of-turn tokens of the chat formats we run, besides the tokenizer's own EOS.
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>")


def encode_prompt(tokenizer: Any, model_cfg: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: chat messages through the tokenizer's chat template (``model.system_prompt``
    prepended unless thinking), raw text as is. Needs only the tokenizer: the runner counts prompts before any
    weights load (evals/alias.py)."""
    if isinstance(prompt.messages, str):
        return tokenizer(prompt.messages, add_special_tokens=True)["input_ids"]
    messages = list(prompt.messages)
    system = model_cfg.system_prompt
    if system and not model_cfg.thinking and messages and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": system}, *messages]
    if prompt.prefill:
        text = tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": prompt.prefill}],
            continue_final_message=True,
            tokenize=False,
        )
        # continue_final_message cuts trailing whitespace of the prefill (R1's "<think>\n"): put it back
        tail = prompt.prefill[len(prompt.prefill.rstrip()):]
        if tail and not text.endswith(tail):
            text += tail
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


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


class HFBackend:
    name = "hf"
    loads_weights = True
    replays = False
    needs_prompts = True
    supports_followup = True
    batch_size = None  # the run's gen.batch_size

    def __init__(
        self,
        model_cfg: Any,
        method: CompressionMethod,
        sampling: SamplingConfig,
        compile: bool | str = "auto",
        rows: int | str = "auto",
        seed: int = 0,
    ):
        self.model_cfg = model_cfg
        self.rows = check_rows(rows)
        self.seed = int(seed)
        self.decode_counts = {"steps": 0, "row_steps": 0, "used_row_steps": 0, "rows": None, "prefills": 0,
                              "kv_allocations": 0, "slots_read": 0, "slots_held": 0}
        self.method = method
        self.sampling = sampling
        resolve_compile(compile, "cpu")  # checks the value (gen.compile) before the weights load
        self.compile = compile
        self.compile_meta: dict[str, Any] = {}
        self.model, self.tokenizer = load_model(model_cfg)
        attach(self.model)
        self.eos = self._eos_ids()
        self.pad = self.tokenizer.pad_token_id
        self._warned_positions = False

    def _eos_ids(self) -> list[int]:
        ids: set[int] = set()
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
        return sorted(ids)

    def _check_positions(self, prompt_tokens: int, max_new: int) -> None:
        """Warn once per backend when ``prompt + max_new_tokens`` passes the model's trained positions
        (``max_position_embeddings``): decoding goes on with positions the model never saw, for a long time."""
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions is None or prompt_tokens + max_new <= positions or self._warned_positions:
            return
        self._warned_positions = True
        log.warning(positions_advice(prompt_tokens, max_new, positions, str(self.model_cfg.name)))

    def meta(self) -> dict[str, Any]:
        """For ``meta.json``: ``decode_compile`` = the ``gen.compile`` value, whether decode ran compiled, the first
        step's wall time (the compile time); ``decode_rows``: ``gen.rows``, the rows used, decode steps, row-steps,
        the share of row-steps spent on rows that held no live sample, prefills run, K/V row allocations made (one
        per engine run) and the share of the rows' slots the steps read."""
        c = dict(self.decode_counts)
        wasted = c["row_steps"] - c["used_row_steps"]
        read, held = c.pop("slots_read"), c.pop("slots_held")
        rows = {"gen.rows": self.rows, **c, "wasted_share": round(wasted / c["row_steps"], 4) if c["row_steps"] else 0,
                "read_share": round(read / held, 4) if held else 0}
        return {"decode_compile": {"gen.compile": self.compile, **self.compile_meta}, "decode_rows": rows}

    def samples_for(self, item_id: str, n: int) -> list[int]:
        return list(range(n))

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt (:func:`encode_prompt` with this backend's tokenizer and model config)."""
        return encode_prompt(self.tokenizer, self.model_cfg, prompt)

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(self.encode(prompt))

    def prompt_record(self, prompt: Prompt) -> dict[str, Any]:
        """The exact input of a request as this backend sends it (the system prompt it prepends included)."""
        return prompt_record(prompt, None if self.model_cfg.thinking else self.model_cfg.system_prompt)

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

        Consecutive requests with the same generation settings share one :class:`~snapstream_core.engine.Engine`
        run (its rows refill across items). Each sample draws from noise keyed on (``gen.seed``, item id, sample
        index, step), so its tokens do not depend on batching, ``gen.rows`` or resume. ``positions=in_cache``
        (keys re-rotated every step, which the fixed slot rows cannot do) goes to ``generate()``'s eager path,
        with the global RNG seeded per item as before."""
        for settings, group in itertools.groupby(requests, key=self._settings):
            if self.method.positions == "in_cache":
                for req in group:
                    yield list(zip(itertools.repeat(req), self._generate_eager(req, settings)))
            else:
                yield from self._stream_engine(settings, group)

    def _settings(self, req: Request) -> tuple:
        """(sampling, stop strings) of a request: the task's per-request settings over the run's ``gen.*``."""
        gen = dict(req.prompt.gen or {})
        task_max = gen.pop("max_new_tokens", None)
        max_new = req.max_new_tokens or task_max or self.sampling.max_new_tokens
        return replace(self.sampling, max_new_tokens=max_new, **gen), tuple(req.prompt.stop)

    def _stream_engine(self, settings: tuple, requests: Iterable[Request]) -> Iterator[list[tuple[Request, Sample]]]:
        sampling, stop = settings
        rows = self.rows if self.rows != "auto" else choose_rows(self.model, self.method, sampling)
        engine = Engine(
            self.model, self.method, sampling, eos=self.eos, rows=rows, seed=self.seed, stop_strings=stop,
            tokenizer=self.tokenizer, compile=resolve_compile(self.compile, self.model.device),
        )
        items = []  # every prompt encoded before decoding: their lengths size the rows once for the whole run
        for req in requests:
            ids = self.encode(req.prompt)
            self._check_positions(len(ids), sampling.max_new_tokens)
            key = item_key(str(getattr(req.item, "item_id", "")))
            items.append(EngineItem(ids, key, tuple(req.sample_idx), sampling.max_new_tokens, tag=req))
        try:
            for ended in engine.run(items):
                yield [(f.item.tag, self._sample(f, sampling, stop, engine)) for f in ended]
        finally:
            self._record_engine(engine)

    def _sample(self, f: Finished, sampling: SamplingConfig, stop: tuple[str, ...], engine: Engine) -> Sample:
        return Sample(
            sample_idx=f.sample_idx,
            completion=cut_at_stop(decode_keeping_think_tags(self.tokenizer, f.tokens), stop),
            prompt_tokens=len(f.item.ids),
            gen_tokens=len(f.tokens),
            finish_reason=f.finish_reason,
            latency_s=f.prefill_s / max(len(f.item.sample_idx), 1) + f.decode_s,
            kv=dict(f.kv),
            measured={"prefill_s": f.prefill_s, "decode_s": f.decode_s, "sampling_warpers": sampling.warper_names(),
                      "decode_compiled": engine.stats.compiled},
        )

    def _record_engine(self, engine: Engine) -> None:
        """Fold one engine run's figures into what :meth:`meta` reports."""
        c = engine.stats.counts
        m = self.compile_meta
        m["compiled"] = engine.stats.compiled if "compiled" not in m else (m["compiled"] and engine.stats.compiled)
        m.setdefault("first_step_s", round(engine.stats.first_step_s, 3))
        steps = self.decode_counts
        steps["steps"] += c.steps
        steps["row_steps"] += c.row_steps
        steps["used_row_steps"] += c.used
        steps["rows"] = engine.rows
        for name in ("prefills", "kv_allocations", "slots_read", "slots_held"):
            steps[name] += getattr(engine.stats, name)

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
                   kv=dict(out.stats), measured=dict(measured))
            for idx, t, reason in zip(req.sample_idx, out.tokens[0], out.finish_reasons[0])
        ]


def legacy_seed(seed: int, key: str) -> int:
    """The global-RNG seed of the eager path (``positions=in_cache``) for one item."""
    return (seed * 1_000_003 + zlib.crc32(key.encode())) % (2**31)


def choose_rows(model, method: CompressionMethod, sampling: SamplingConfig, n_items: int | None = None) -> int:
    """``gen.rows=auto``: how many decode rows to hold at once.

    The runner resolves ``auto`` on CUDA before the weights load, with the planner (``evals.plan.job.choose_rows``:
    the most rows whose peak fits ``plan.memory_gib``), and passes the integer. This fallback serves the backend
    built directly (no run config): on CUDA every sample of an item at once, at most 8; on CPU the engine's
    ``MIN_CPU_ROWS`` (its forwards hold at least that many rows there anyway)."""
    if model.device.type != "cuda":
        return MIN_CPU_ROWS
    return max(1, min(sampling.n * (n_items or 1), 8))


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string, as lm-eval cuts ``until``."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(found)] if found else text
