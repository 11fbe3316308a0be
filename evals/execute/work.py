"""The samples a run still has to produce, turned into backend requests, finished samples and graded outcomes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from evals.execute.backends.base import Backend, Request, Sample
from evals.execute.backends.prompts import PromptStore
from evals.execute.expected import Work as ExpectedWork
from evals.execute.prepare import RunPlan
from tasks.base import Prompt
from tasks.protocol import answer_part, call_extent, hook, score_all

COUNTED = 64  # prompts tokenized for the cost line (the rest counted at their mean)


@dataclass(frozen=True)
class Work:
    """Samples ``sample_idx`` of ``item`` still missing from ``samples.jsonl``."""

    item: Any
    sample_idx: tuple[int, ...]


@dataclass(frozen=True)
class Outcome:
    """One finished, scored sample: what the row of ``samples.jsonl`` is made of."""

    request: Request
    sample: Sample
    thinking_closed: bool
    scored: dict[str, Any]


def pending_work(backend: Backend, p: RunPlan, items: list, done: set[tuple[str, int]]) -> list[Work]:
    """The (item, samples) pairs a resume still has to produce, in item order."""
    work = missing(items, lambda item_id: backend.samples_for(item_id, p.sampling.n), done)
    backend.report_missing(len(items))
    return work


def expected_work(p: RunPlan, backend: Backend, work: list[Work], counted: int = COUNTED) -> ExpectedWork:
    """What ``work`` will generate: its items, their prompt tokens (the first ``counted`` prompts rendered and
    tokenized as the backend will send them, the rest at their mean), samples and new tokens at most."""
    samples = sum(len(w.sample_idx) for w in work)
    if not work or not backend.needs_prompts:
        return ExpectedWork(len(work), 0, samples, p.spec.gen.max_new_tokens)
    lengths = []
    for w in work[:counted]:
        prompt = p.task.prompt(w.item, p.spec.model, cfg=p.spec.task, tokenizer=backend.tokenizer)
        lengths.append(backend.prompt_tokens(prompt if isinstance(prompt, Prompt) else Prompt(prompt)) or 0)
    tokens = round(sum(lengths) * len(work) / len(lengths))
    return ExpectedWork(len(work), tokens, samples, p.spec.gen.max_new_tokens)


def missing(items: list, wanted: Callable[[str], Iterable[int]], done: set[tuple[str, int]]) -> list[Work]:
    """For each item, the sample indices of ``wanted(item_id)`` not in ``done``; items with none left out."""
    work = []
    for item in items:
        key = str(item.item_id)
        left = tuple(i for i in wanted(key) if (key, i) not in done)
        if left:
            work.append(Work(item, left))
    return work


def produce(p: RunPlan, backend: Backend, work: list[Work], prompts: PromptStore
            ) -> Iterator[list[tuple[Request, Sample]]]:
    """Finished samples as ``(request, sample)`` lists: streamed as they end from a backend that can (requests are
    built lazily, so the prompts of items not reached yet are not rendered), else one ``generate`` per chunk of
    ``gen.batch_size`` requests. Tasks with a second call (``followup``) go chunk by chunk (on a streaming backend
    with decode rows, chunks of at least as many items as rows, so that the rows are busy): every first prompt is
    rendered up front, the backend's rows are sized once for the run, second calls included (:func:`reserve`), and
    each chunk's second calls run as one ``generate``."""
    followup = hook(p.task, "followup") is not None and backend.supports_followup

    def requests(chunk: Iterable[Work]) -> Iterator[Request]:
        return (request(p, backend, prompts, w) for w in chunk)

    if backend.streams and not followup:
        yield from backend.stream(requests(work))
        return
    size = backend.batch_size or p.batch_size
    if backend.streams and p.decode_rows:  # gen.batch_size is for backends that do not stream: fill the rows
        size = max(size, p.decode_rows)
    chunks: Iterable[list[Request]] = (list(requests(c)) for c in batches(work, size))
    if followup:
        chunks = list(chunks)
        reserve(p, backend, [req for reqs in chunks for req in reqs])
    for reqs in chunks:
        outputs = backend.generate(reqs)
        if followup:
            followups(p, backend, reqs, outputs)
        yield [(req, s) for req, samples in zip(reqs, outputs) for s in samples]


def reserve(p: RunPlan, backend: Backend, requests: list[Request]) -> tuple[int, int] | None:
    """Tell ``backend`` the most prompt and new tokens any call of the run will have: the first calls' longest
    prompt and widest request, through the task's bound on its second calls (:func:`tasks.protocol.call_extent`,
    the function the planner sizes the job's memory with). Returns the bound; None for a backend that holds no
    rows of ours (``backend=vllm`` sizes its own; replay) and so is not asked."""
    if not requests or not p.spec.backend.engine or not backend.needs_prompts:
        return None
    lengths = [backend.prompt_tokens(req.prompt) for req in requests]
    if any(n is None for n in lengths):
        return None
    new = max(req.new_tokens(p.sampling.max_new_tokens) for req in requests)
    bound = call_extent(p.task, max(lengths), new, p.spec.model, p.spec.task, backend.tokenizer)
    backend.reserve(*bound)
    return bound


def score(p: RunPlan, ended: list[tuple[Request, Sample]]) -> list[Outcome]:
    """Split each completion at the thinking block and grade the answers (one ``score_all`` call for the list)."""
    thinking = bool(p.spec.model.thinking)
    parts = [answer_part(p.task, s.completion, thinking, p.spec.task) for _, s in ended]
    scores = score_all(p.task, [(req.item, text) for (req, _), (text, _) in zip(ended, parts)], p.spec.task)
    return [Outcome(req, s, closed, scored) for (req, s), (_, closed), scored in zip(ended, parts, scores)]


def followups(p: RunPlan, backend: Backend, requests: list[Request], outputs: list[list]) -> None:
    """Second calls of multi-call protocols (LongBench-v2 CoT), all of a chunk in one ``generate``: each sample's
    answer call replaces its completion; the stages are kept under ``completions``, ``gen_tokens`` counts both
    calls, ``prompt_tokens`` is the first's."""
    calls: list[tuple[Sample, Request]] = []
    for req, samples in zip(requests, outputs):
        for s in samples:
            nxt = p.task.followup(req.item, s.completion, p.spec.model, cfg=p.spec.task, tokenizer=backend.tokenizer)
            if nxt is None:
                continue
            prompt, max_new = nxt
            prompt = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
            calls.append((s, Request(req.item, prompt, (s.sample_idx,), max_new_tokens=max_new)))
    if not calls:
        return
    answers = backend.generate([second for _, second in calls])
    for (s, _), (second,) in zip(calls, answers):
        s.stages = [s.completion, second.completion]
        s.completion = second.completion
        s.gen_tokens = (s.gen_tokens or 0) + (second.gen_tokens or 0)
        s.finish_reason = second.finish_reason
        s.latency_s = (s.latency_s or 0) + (second.latency_s or 0)


def batches(work: list[Work], size: int) -> Iterator[list[Work]]:
    """Consecutive chunks whose requests ask for the same number of samples."""
    batch: list[Work] = []
    for entry in work:
        if batch and (len(batch) == size or len(entry.sample_idx) != len(batch[0].sample_idx)):
            yield batch
            batch = []
        batch.append(entry)
    if batch:
        yield batch


def request(p: RunPlan, backend: Backend, prompts: PromptStore, w: Work) -> Request:
    """The task's prompt for ``w`` (none for a backend that needs none), stored in ``prompts.jsonl.gz`` exactly as
    the backend will send it."""
    if not backend.needs_prompts:
        return Request(item=w.item, prompt=None, sample_idx=w.sample_idx)
    prompt = p.task.prompt(w.item, p.spec.model, cfg=p.spec.task, tokenizer=backend.tokenizer)
    if not isinstance(prompt, Prompt):
        prompt = Prompt(prompt)
    (phash,) = prompts.add([backend.prompt_record(prompt)])
    return Request(item=w.item, prompt=prompt, sample_idx=w.sample_idx, prompt_hash=phash)
