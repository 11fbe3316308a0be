"""Greedy token agreement, teacher-forced: two decode paths fed the same reference sequence, their argmax compared
position by position.

Exact token equality is the wrong test in bf16: where the top two logits are within rounding of each other, two
correct paths (eager and compiled, the engine and plain transformers) may pick different tokens, and from there on
their free-running sequences share nothing. So each path is fed the reference's tokens (teacher forcing) and only
its argmax at each position is compared. The engine is driven through :meth:`Engine.run` only (it returns tokens,
not logits): it decodes greedily from the prompt plus the reference's first ``k`` tokens, and at the first position
where it leaves the reference the comparison records that position and starts again from the reference's tokens up
to and including it (:func:`forced_tokens`). Up to its first disagreement a free-running greedy path *is*
teacher-forced (its history is the reference's), so this is the teacher-forced argmax at every position.

The verdict (:func:`judge`) under a stated :class:`Tolerance`: the share of positions that agree is at least
``min_agreement``, and where the reference's logits are known (plain transformers, one teacher-forced forward) every
disagreement is at a near-tie: the reference's top-2 gap at most ``margin`` times ``max(1, |top logit|)``. In fp32
(``--tiny`` on the CPU) the tolerance is exact: every position agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Run = Callable[[list[int], int], list[int]]  # (ids, n) -> the path's n greedy tokens after ids


@dataclass(frozen=True)
class Tolerance:
    """``min_agreement``: the least share of positions whose argmax equals the reference's; ``margin``: a
    disagreement is a near-tie when the reference's top-2 logit gap is at most ``margin * max(1, |top logit|)``."""

    min_agreement: float
    margin: float


EXACT = Tolerance(1.0, 0.0)  # fp32: every position agrees
BF16 = Tolerance(0.95, 2**-5)  # bf16 keeps 8 significant bits: 2**-5 of the top logit is about 4 of its ulps


def tolerance_for(dtype) -> Tolerance:
    import torch

    return EXACT if dtype == torch.float32 else BF16


MAX_STARTS = 8  # a path that disagrees more often is judged on the positions compared by then


def forced_tokens(run_ref: Run, run_path: Run, prompt: Sequence[int], n: int,
                  max_starts: int = MAX_STARTS) -> tuple[list[int], list[int], int]:
    """``(reference, path, runs)``: up to ``n`` tokens of each, the path fed the reference's tokens (see the module
    docstring); both restart from the same prefix after each disagreement (``runs``: how many starts, at most
    ``max_starts``: each is a run of the engine, so the check's time stays bounded)."""
    ref: list[int] = []
    got: list[int] = []
    runs = 0
    while len(ref) < n and runs < max_starts:
        k = len(ref)
        r, p = run_ref(list(prompt) + ref, n - k), run_path(list(prompt) + ref, n - k)
        runs += 1
        m = min(len(r), len(p), n - k)
        if m == 0:
            break
        d = next((j for j in range(m) if r[j] != p[j]), m - 1)
        ref += r[: d + 1]
        got += p[: d + 1]
    return ref, got, runs


def judge(reference: Sequence[int], path: Sequence[int], gaps: Sequence[float] | None, tol: Tolerance) -> dict:
    """The verdict of ``path``'s argmax against ``reference``'s; ``gaps``: the reference's relative top-2 gap per
    position (None: not known, disagreements are counted but cannot be excused)."""
    n = len(reference)
    disagree = [i for i in range(n) if i >= len(path) or path[i] != reference[i]]
    agreement = (n - len(disagree)) / n if n else 0.0
    out: dict[str, Any] = {"positions": n, "agreement": agreement, "disagree_at": disagree, **asdict(tol)}
    ok = n > 0 and agreement >= tol.min_agreement
    if gaps is not None:
        not_ties = [i for i in disagree if gaps[i] > tol.margin]
        out["disagree_not_near_tie"] = not_ties
        out["gaps_at_disagreements"] = [round(gaps[i], 6) for i in disagree]
        ok = ok and not not_ties
    else:
        out["gaps"] = "not known (the reference is the engine, which returns tokens, not logits)"
    out["passed"] = ok
    return out


def transformers_greedy(model, prompt: Sequence[int], n: int) -> list[int]:
    """Plain transformers' greedy tokens: the model's own forward and its own cache, one token at a time."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(torch.tensor([list(prompt)], device=device), use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        for _ in range(n - 1):
            out = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=out.past_key_values,
                        use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def reference_gaps(model, prompt: Sequence[int], reference: Sequence[int]) -> tuple[list[int], list[float]]:
    """One teacher-forced forward of plain transformers over ``prompt + reference[:-1]``: per reference position its
    argmax and its relative top-2 gap ``(top1 - top2) / max(1, |top1|)`` (logits in fp32)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt) + list(reference[:-1])], device=device)
    with torch.no_grad():
        logits = model(ids, logits_to_keep=len(reference)).logits[0].float()  # (n, V)
    top = logits.topk(2, dim=-1).values
    gaps = (top[:, 0] - top[:, 1]) / top[:, 0].abs().clamp(min=1.0)
    return logits.argmax(-1).tolist(), gaps.tolist()


def engine_greedy(engine) -> Run:
    """A path of the engine: one greedy sample per call through :meth:`Engine.run` (the request's own settings)."""
    from snapstream_core.engine import EngineItem
    from snapstream_core.sampling import SamplingConfig

    def run(ids: list[int], n: int) -> list[int]:
        item = EngineItem(ids, 0, (0,), n, sampling=SamplingConfig(max_new_tokens=n))
        return [t for batch in engine.run([item]) for f in batch for t in f.tokens]

    return run


def against_transformers(model, paths: dict[str, Run], prompt: Sequence[int], n: int) -> dict[str, dict]:
    """Each path against plain transformers' greedy sequence, teacher-forced, judged with the model dtype's
    tolerance (gaps known)."""
    reference = transformers_greedy(model, prompt, n)
    forced_argmax, gaps = reference_gaps(model, prompt, reference)
    tol = tolerance_for(next(model.parameters()).dtype)
    out = {}
    for name, run in paths.items():
        ref, got, runs = forced_tokens(lambda ids, m: reference[len(ids) - len(prompt):][:m], run, prompt, n)
        out[name] = {**judge(ref, got, gaps[: len(ref)], tol), "starts": runs, "asked": n}
    out["reference"] = {"path": "transformers (its own forward and cache)", "tokens": n,
                        "cached_equals_teacher_forced": forced_argmax == reference}
    return out
