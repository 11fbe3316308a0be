"""The narrow interface between the runner and a backend."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from evals.execute.backends.prompts import prompt_record
from tasks.base import Prompt


@dataclass(frozen=True)
class Request:
    """Generate the samples ``sample_idx`` of ``item`` for ``prompt``."""

    item: Any
    prompt: Prompt | None
    sample_idx: tuple[int, ...]
    max_new_tokens: int | None = None  # None: the prompt's own (a task's protocol), else the run's gen.max_new_tokens
    prompt_hash: str | None = None  # the prompt's record in prompts.jsonl.gz

    def new_tokens(self, run_max_new_tokens: int) -> int:
        """The request's ``max_new_tokens``: its own, else its prompt's (``Prompt.gen``), else the run's."""
        own = ((self.prompt.gen or {}) if self.prompt is not None else {}).get("max_new_tokens")
        return self.max_new_tokens or own or run_max_new_tokens


@dataclass
class Sample:
    """One completion and what was measured while producing it (None where the backend cannot know)."""

    sample_idx: int
    completion: str
    prompt_tokens: int | None = None
    gen_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float | None = None
    kv: dict[str, Any] = field(default_factory=dict)  # the KV figures (kv_tokens_peak, kv_bytes_peak, ...)
    measured: dict[str, Any] = field(default_factory=dict)  # timings and flags (prefill_s, decode_compiled, ...)
    stages: list[str] | None = None  # completions of every call of a multi-call protocol, the last one final
    token_ids: list[int] | None = None  # the generated tokens the completion decodes (not written to rows)
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per token, the top (id, logprob) pairs, when asked


class Backend(ABC):
    """What the runner needs of a backend, with a default for every optional capability (the runner never probes
    a backend with ``hasattr``; as lm-eval's ``LM`` base class). The class attributes are its capabilities, which the
    runner reads instead of testing ``name``:

    - ``loads_weights``: it runs model weights (``model.*`` is checked before the run, the weights are part of the
      run's identity); False: the run's identity holds the backend's input file instead.
    - ``replays``: it scores completions read from ``backend.path`` (checked to exist and to match the run's items
      before any work); it builds as ``cls(path, partial=...)`` rather than ``cls(model_cfg, method, sampling)``.
    - ``engine``: it runs our decode engine (compression methods apply; on CUDA the planner sizes its rows); False:
      it builds as ``cls(model_cfg, settings, sampling)`` with the settings its registry entry checked.
    - ``needs_prompts``: requests carry the task's rendered prompt (False: ``Request.prompt`` is None).
    - ``supports_followup``: it can run a task's second call (``followup``, LongBench-v2 CoT).
    - ``streams``: :meth:`stream` yields samples as they end across requests (False: the runner calls
      :meth:`generate` once per chunk of ``batch_size`` requests).
    - ``batch_size``: requests per ``generate`` call; None: the run's ``gen.batch_size``.
    """

    name: str = ""
    tokenizer: Any = None  # None for backends that load no tokenizer
    model: Any = None  # the loaded torch model, for backends that hold one (its speed is measured before a run)
    loads_weights: bool = False
    replays: bool = False
    engine: bool = False
    needs_prompts: bool = True
    supports_followup: bool = False
    streams: bool = False
    batch_size: int | None = None

    @classmethod
    def code_identity(cls, settings: Any) -> dict[str, Any]:
        """The backend's part of the generation identity (:func:`evals.execute.code_identity.generation_id`), known
        before it is built (``settings``: its checked keys, :attr:`evals.config.spec.BackendSpec.settings`); by
        default its name (its code is among the hashed sources)."""
        return {"name": cls.name}

    @abstractmethod
    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        """One list of samples per request, in the order of ``request.sample_idx``."""

    def stream(self, requests: Iterable[Request]) -> Iterator[list[tuple[Request, Sample]]]:
        """Samples as ``(request, sample)`` lists as they end; by default one :meth:`generate` per request."""
        for req in requests:
            (samples,) = self.generate([req])
            yield [(req, s) for s in samples]

    def reserve(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Before the first request: every request of the run has a prompt of at most ``prompt_tokens`` tokens and
        at most ``max_new_tokens`` new tokens (its second calls included), so a backend that holds decode rows
        sizes them once; a request past either is refused in one line. By default nothing."""

    def samples_for(self, item_id: str, n: int) -> list[int]:
        """The sample indices this backend can produce for an item (by default ``0 .. n-1``)."""
        return list(range(n))

    def prompt_tokens(self, prompt: Prompt) -> int | None:
        """Token count of a prompt as the model would see it (None without a tokenizer)."""
        return None

    def prompt_record(self, prompt: Prompt) -> dict[str, Any]:
        """The exact input of a request as this backend sends it (by default: no system prompt prepended)."""
        return prompt_record(prompt, None)

    def meta(self) -> dict[str, Any]:
        """What the backend reports for ``meta.json`` (by default nothing)."""
        return {}

    def check_matches(self, item_ids: list[str], model: str) -> None:
        """Refuse, before any work, input that does not belong to the run's items (a replaying backend's file)."""

    def report_missing(self, n_items: int) -> None:
        """Say which of the run's ``n_items`` items the backend has nothing for (a replaying backend's file)."""

    def cached(self, wanted: Iterable[tuple[Any, Iterable[int]]]) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
        """``(item, row, prompt_record)`` of the wanted (item, sample indices) already finished elsewhere (the sample
        cache, :class:`~evals.execute.caching.CachingBackend`); by default none."""
        return []

    def close(self) -> None:
        """Release what the backend holds outside this process (a worker process); called when its run ends, so that
        the next job of a sweep starts with the device free. By default nothing."""

    def keep(self, item: Any, row: dict[str, Any], prompt: dict[str, Any] | None) -> None:
        """A finished row of the run, for a backend that keeps them (the sample cache); by default dropped."""

    def watch(self, callback: Callable[[int, int], None] | None) -> None:
        """Call ``callback(prompt_tokens_prefilled, tokens_decoded)`` (counts so far) while generating, between the
        samples it yields, for a progress line that moves while a batch decodes; None stops. By default never."""
