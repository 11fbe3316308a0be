"""``backend=hf``: transformers ``generate`` under the compression core, with chat templates and batching."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from evals.backends.base import Request, Sample
from evals.models import load_model
from snapstream_core import attach
from snapstream_core.generate import SamplingConfig, generate
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.static_decode import resolve_compile
from tasks.base import Prompt, decode_keeping_think_tags

log = logging.getLogger(__name__)

# End-of-turn tokens of the chat formats we run, besides the tokenizer's own EOS.
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>")


class HFBackend:
    name = "hf"
    loads_weights = True
    replays = False
    needs_prompts = True
    supports_followup = True
    batch_size = None  # the run's gen.batch_size

    def __init__(
        self, model_cfg: Any, method: CompressionMethod, sampling: SamplingConfig, compile: bool | str = "auto"
    ):
        self.model_cfg = model_cfg
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
        log.warning("gen.max_new_tokens=%d with a prompt of %d tokens goes past the %d positions %s was trained for: "
                    "tokens beyond position %d are generated out of distribution (lower gen.max_new_tokens)",
                    max_new, prompt_tokens, positions, self.model_cfg.name, positions)

    def meta(self) -> dict[str, Any]:
        """For ``meta.json``: ``decode_compile`` = the ``gen.compile`` value, whether decode ran compiled and the first
        compiled step's wall time (the compile time)."""
        return {"decode_compile": {"gen.compile": self.compile, **self.compile_meta}}

    def samples_for(self, item_id: str, n: int) -> list[int]:
        return list(range(n))

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: chat messages through the tokenizer's chat template, raw text as is."""
        if isinstance(prompt.messages, str):
            return self.tokenizer(prompt.messages, add_special_tokens=True)["input_ids"]
        messages = list(prompt.messages)
        system = self.model_cfg.system_prompt
        if system and not self.model_cfg.thinking and messages and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system}, *messages]
        if prompt.prefill:
            text = self.tokenizer.apply_chat_template(
                [*messages, {"role": "assistant", "content": prompt.prefill}],
                continue_final_message=True,
                tokenize=False,
            )
            # continue_final_message cuts trailing whitespace of the prefill (R1's "<think>\n"): put it back
            tail = prompt.prefill[len(prompt.prefill.rstrip()):]
            if tail and not text.endswith(tail):
                text += tail
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(self.encode(prompt))

    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        """One list of samples per request; requests run in one ``generate`` call per group sharing their number of
        samples and generation settings (``max_new_tokens``, the prompt's ``gen`` and ``stop``)."""
        groups: dict[tuple, list[int]] = {}
        for i, req in enumerate(requests):
            gen = tuple(sorted((req.prompt.gen or {}).items()))
            groups.setdefault((len(req.sample_idx), req.max_new_tokens, gen, req.prompt.stop), []).append(i)
        results: list[list[Sample]] = [[] for _ in requests]
        for members in groups.values():
            for i, samples in zip(members, self._generate_group([requests[i] for i in members])):
                results[i] = samples
        return results

    def _generate_group(self, requests: list[Request]) -> list[list[Sample]]:
        encoded = [self.encode(r.prompt) for r in requests]
        first = requests[0]
        gen = dict(first.prompt.gen or {})  # the task's per-request settings, over the run's gen.*
        task_max = gen.pop("max_new_tokens", None)
        max_new = first.max_new_tokens or task_max or self.sampling.max_new_tokens
        n = len(first.sample_idx)
        sampling = replace(self.sampling, n=n, max_new_tokens=max_new, **gen)
        self._check_positions(max(len(e) for e in encoded), max_new)
        stop = first.prompt.stop
        start = time.perf_counter()
        out = generate(
            self.model,
            encoded,
            self.method,
            sampling,
            eos_token_ids=self.eos,
            pad_token_id=self.pad,
            stop_strings=stop,
            tokenizer=self.tokenizer,
            compile=self.compile,
        )
        if not self.compile_meta:  # the first call: whether decode was compiled, and the first step's wall time
            self.compile_meta = {"compiled": out.compiled, "first_step_s": round(out.first_step_s, 3)}
            if out.compiled:
                log.info("gen.compile: decode compiled; first step (compile) %.1f s", out.first_step_s)
        per_row = (time.perf_counter() - start) / (len(requests) * n)
        kv = {**out.stats, "prefill_s": out.prefill_s, "decode_s": out.decode_s,
              "sampling_warpers": sampling.warper_names(), "decode_compiled": out.compiled}
        results = []
        for req, ids, toks, reasons in zip(requests, encoded, out.tokens, out.finish_reasons):
            results.append(
                [
                    Sample(
                        sample_idx=idx,
                        completion=cut_at_stop(decode_keeping_think_tags(self.tokenizer, t), stop),
                        prompt_tokens=len(ids),
                        gen_tokens=len(t),
                        finish_reason=reason,
                        latency_s=per_row,
                        kv=kv,
                    )
                    for idx, t, reason in zip(req.sample_idx, toks, reasons)
                ]
            )
        return results


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string, as lm-eval cuts ``until``."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(found)] if found else text
