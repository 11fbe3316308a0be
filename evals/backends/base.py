"""The narrow interface between the runner and a backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tasks.base import Prompt


@dataclass(frozen=True)
class Request:
    """Generate the samples ``sample_idx`` of ``item`` for ``prompt``."""

    item: Any
    prompt: Prompt | None
    sample_idx: tuple[int, ...]
    max_new_tokens: int | None = None  # None: the run's gen.max_new_tokens
    prompt_hash: str | None = None  # the prompt's record in prompts.jsonl.gz


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


def check_rows(value: Any) -> int | str:
    """``gen.rows``: ``auto`` or an integer >= 1 (decode rows held at once)."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"gen.rows: must be auto or an integer >= 1 (decode rows held at once), got {value!r}")
    return value


class Backend(Protocol):
    """What the runner needs of a backend. The class attributes are its capabilities, which the runner reads
    instead of testing ``name``:

    - ``loads_weights``: it runs model weights (``model.*`` is checked before the run, the weights are part of the
      run's identity); False: the run's identity holds the backend's input file instead.
    - ``replays``: it scores completions read from ``backend.path`` (checked to exist and to match the run's items
      before any work); it builds as ``cls(path, partial=...)`` rather than ``cls(model_cfg, method, sampling)``.
    - ``needs_prompts``: requests carry the task's rendered prompt (False: ``Request.prompt`` is None).
    - ``supports_followup``: it can run a task's second call (``followup``, LongBench-v2 CoT).
    - ``batch_size``: requests per ``generate`` call; None: the run's ``gen.batch_size``.
    """

    name: str
    tokenizer: Any  # None for backends that load no tokenizer
    loads_weights: bool
    replays: bool
    needs_prompts: bool
    supports_followup: bool
    batch_size: int | None

    def samples_for(self, item_id: str, n: int) -> list[int]:
        """The sample indices this backend can produce for an item."""

    def prompt_tokens(self, prompt: Prompt) -> int | None:
        """Token count of a prompt as the model would see it (None without a tokenizer)."""

    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        """One list of samples per request, in the order of ``request.sample_idx``."""
