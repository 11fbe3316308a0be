"""The sample cache as a backend: it wraps the backend that generates (as lm-eval's ``CachingLM`` wraps an ``LM``).

The run asks it for the rows it already holds (:meth:`CachingBackend.cached`), hands it every finished row
(:meth:`CachingBackend.keep`), and otherwise uses it as the backend it wraps. That backend is built on first use, so
a run whose every sample is in the cache loads no weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from evals.execute.backends.base import Backend, Request, Sample
from evals.execute.sample_cache import SampleCache
from tasks.base import Prompt


class CachingBackend(Backend):
    """``build()``'s backend (built at its first use) in front of the sample cache ``cache``."""

    def __init__(self, build: Callable[[], Backend], cache: SampleCache):
        self._build = build
        self._inner: Backend | None = None
        self.cache = cache

    @property
    def inner(self) -> Backend:
        """The wrapped backend (built now if it was not yet)."""
        if self._inner is None:
            self._inner = self._build()
        return self._inner

    name = property(lambda self: self.inner.name)
    tokenizer = property(lambda self: self.inner.tokenizer)
    model = property(lambda self: self.inner.model)
    loads_weights = property(lambda self: self.inner.loads_weights)
    replays = property(lambda self: self.inner.replays)
    needs_prompts = property(lambda self: self.inner.needs_prompts)
    supports_followup = property(lambda self: self.inner.supports_followup)
    streams = property(lambda self: self.inner.streams)
    batch_size = property(lambda self: self.inner.batch_size)
    engine = property(lambda self: self.inner.engine)

    def cached(self, wanted: Iterable[tuple[Any, Iterable[int]]]) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
        """``(item, row, prompt_record)`` of each wanted (item, sample indices) the cache holds, in order."""
        return list(self.cache.lookup(wanted))

    def keep(self, item: Any, row: dict[str, Any], prompt: dict[str, Any] | None) -> None:
        """Store a finished row (and its prompt record) for later runs."""
        self.cache.put(item, row, prompt)

    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        return self.inner.generate(requests)

    def stream(self, requests: Iterable[Request]) -> Iterator[list[tuple[Request, Sample]]]:
        return self.inner.stream(requests)

    def samples_for(self, item_id: str, n: int) -> list[int]:
        return self.inner.samples_for(item_id, n)

    def reserve(self, prompt_tokens: int, max_new_tokens: int) -> None:
        self.inner.reserve(prompt_tokens, max_new_tokens)

    def prompt_tokens(self, prompt: Prompt) -> int | None:
        return self.inner.prompt_tokens(prompt)

    def prompt_record(self, prompt: Prompt) -> dict[str, Any]:
        return self.inner.prompt_record(prompt)

    def meta(self) -> dict[str, Any]:
        return {} if self._inner is None else self._inner.meta()

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def check_matches(self, item_ids: list[str], model: str) -> None:
        self.inner.check_matches(item_ids, model)

    def report_missing(self, n_items: int) -> None:
        self.inner.report_missing(n_items)

    def watch(self, callback: Callable[[int, int], None] | None) -> None:
        self.inner.watch(callback)
