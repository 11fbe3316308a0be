"""Teacher forcing through the decode engine: one row of one arm fed a fixed continuation, token by token, with the
next-token logits of every step kept, the time of every step, and the engine's own KV figures of the sample.

The arm decodes on its own path (its ``KVFormat``'s row storage, its compaction), as a run with ``backend=hf`` does,
in one row with ``row_blocks=False`` (a forward of exactly one row: no padding rows in the step's time). The first
token is the arm's own greedy draw from its prefill logits (kept as ``first``); each decode step ``k`` then reads
token ``k - 1`` of the forced continuation (the engine's drawn token is replaced before the step) and its logits are
the distribution of token ``k``. Several arms advance together, one step each in turn (:func:`forced_decode`), so
that a slow phase of a shared machine falls on every arm alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from snapstream_core.engine import Engine, EngineItem
from snapstream_core.engine.step import Step
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig


class RecordingStep(Step):
    """The eager decode step, keeping the logits (R, V) float32 of its last call (``logits``)."""

    logits: torch.Tensor | None = None

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        self.logits = super().__call__(*args, **kwargs)
        return self.logits


@dataclass
class Forced:
    """One arm fed a continuation of N tokens: ``first`` its greedy first token (drawn from its prefill logits);
    ``logits`` N - 1 tensors (V,) float32, entry ``k - 1`` the distribution of token ``k``; ``step_s`` the wall
    seconds of each of the N - 1 decode steps (the compaction of a due row included); ``kv`` the engine's KV
    figures of the sample (``kv_bytes_peak``, ...); ``row_bytes`` the bytes the engine's row storage allocates per
    row (every layer: codes, scales, residual); ``compactions``: compaction calls."""

    name: str
    method: CompressionMethod
    first: int = -1
    logits: list[torch.Tensor] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    kv: dict[str, int] = field(default_factory=dict)
    row_bytes: int = 0
    compactions: int = 0


def greedy(model, method: CompressionMethod, ids: list[int], new_tokens: int) -> list[int]:
    """``new_tokens`` greedy tokens of ``method`` on the engine (one row, no EOS)."""
    eng = Engine(model, method, SamplingConfig(max_new_tokens=new_tokens), eos=[], rows=1, row_blocks=False)
    (done,) = [f for ended in eng.run([EngineItem(ids, 0, (0,), new_tokens)]) for f in ended]
    return done.tokens


@torch.no_grad()
def forced_decode(model, arms: dict[str, CompressionMethod], ids: list[int], tokens: list[int]) -> dict[str, Forced]:
    """Feed ``tokens`` (N) after the prompt ``ids`` to every arm, one decode step of each in turn (the order rotated
    every step); returns each arm's :class:`Forced`."""
    N = len(tokens)
    runs, engines = {}, {}
    for name, method in arms.items():
        step = RecordingStep(False, model.device.type)
        eng = Engine(model, method, SamplingConfig(max_new_tokens=N), eos=[], rows=1, row_blocks=False, step=step)
        eng.start([EngineItem(ids, 0, (0,), N)])
        eng.fill()
        runs[name] = Forced(name, method, first=int(eng.batch.tok[0]), row_bytes=eng.cache.nbytes_per_row())
        eng.batch.tok[0] = tokens[0]
        engines[name] = (eng, step)
    names = list(arms)
    for k in range(1, N):
        for name in names[k % len(names):] + names[: k % len(names)]:
            eng, step = engines[name]
            start = time.perf_counter()
            eng.step()
            runs[name].step_s.append(time.perf_counter() - start)
            runs[name].logits.append(step.logits[0].float().cpu())
            eng.batch.tok[0] = tokens[k]
    for name, (eng, _) in engines.items():
        (done,) = eng.harvest()
        runs[name].kv = done.kv
        runs[name].compactions = eng.stats.compactions
    return runs


def fidelity(ref: Forced, arm: Forced, tokens: list[int]) -> dict[str, float]:
    """Agreement of an arm's decode-step distributions with the reference's over the same forced continuation
    ``tokens`` (the reference's greedy tokens): ``top1_agree`` the share of steps whose argmax is the reference's;
    ``mean_kl`` the mean KL(reference || arm) in nats (float64); ``greedy_prefix`` the tokens of ``tokens`` the
    arm's own greedy decode reproduces before its first different token (up to that token its inputs are the forced
    ones, so its first token and the argmax of its steps are what it would decode alone)."""
    p = torch.stack(ref.logits).double().log_softmax(-1)
    q = torch.stack(arm.logits).double().log_softmax(-1)
    kl = (p.exp() * (p - q)).sum(-1)
    same = p.argmax(-1) == q.argmax(-1)
    mine = [arm.first, *q.argmax(-1).tolist()]
    prefix = next((k for k, (a, t) in enumerate(zip(mine, tokens)) if a != t), len(tokens))
    return {"top1_agree": same.double().mean().item(), "mean_kl": kl.mean().item(), "greedy_prefix": prefix}
