"""What one run measures: the cases (method × context × batch, and their plain-cache references) in the order they
run, interleaved so that drift of the machine hits every method alike.

A case is either a method of the core (a name in ``snapstream_core.methods.METHODS``) over a prompt of
``context`` tokens, or ``plain``: transformers' own ``DynamicCache`` with the stock attention over a prompt of
``context`` tokens. ``plain`` at the length a method keeps after prefill is that method's **physical reference**:
each decode step then attends over exactly as many keys as the method's does, so its decode time is the best any
compression can reach at that footprint. ``plain`` at the full context is the reference of ``none``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bench.config import WARM_STEPS, BenchConfig
from snapstream_core.methods import METHODS
from snapstream_core.methods.base import CompressionMethod

PLAIN = "plain"
BATCH_METHOD = "snapstream"  # the one method also measured at every batch size (the recipe this project is about)
COMPILED = "+compiled"  # suffix of a method decoded by the engine's compiled step (snapstream_core.engine.step)


def base_method(name: str) -> str:
    """``snapstream+compiled`` -> ``snapstream``."""
    return name.removesuffix(COMPILED)


def is_compiled(name: str) -> bool:
    return name.endswith(COMPILED)


@dataclass(frozen=True)
class Case:
    """One measurement: ``method`` over a prompt of ``context`` tokens, decoded at ``batch`` sequences."""

    attn: str
    method: str
    context: int
    batch: int = 1

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.attn, self.method, self.context, self.batch)

    def as_dict(self) -> dict:
        return asdict(self)


def build_method(name: str, cfg: BenchConfig) -> CompressionMethod:
    """The core's method dataclass for ``name`` with the run's budgets (all methods share one footprint): its class's
    ``from_bench`` hook on :meth:`BenchConfig.shared_knobs`."""
    name = base_method(name)
    if name not in METHODS:
        raise ValueError(f"bench.methods: unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name].from_bench(cfg.shared_knobs())


def kept_after_prefill(method: str, context: int, cfg: BenchConfig) -> int:
    """KV entries per layer and KV head that ``method`` holds right after the prefill of ``context`` tokens: its
    footprint with nothing decoded (``plain``: the whole prompt)."""
    if method == PLAIN:
        return context
    return build_method(method, cfg).footprint(context, 0)


def effective_contexts(cfg: BenchConfig, max_positions: int) -> list[int]:
    """The configured contexts, each cut so that prompt + decoded tokens fit the model's positions, deduplicated."""
    limit = max_positions - WARM_STEPS - cfg.steps - 1
    out: list[int] = []
    for c in cfg.contexts:
        c = min(c, limit)
        if c not in out:
            out.append(c)
    return out


def _rotate(items: list[Case], k: int) -> list[Case]:
    k %= max(len(items), 1)
    return items[k:] + items[:k]


def context_group(cfg: BenchConfig, attn: str, context: int) -> list[Case]:
    """The methods at one context and the plain references they are compared with (no duplicates)."""
    cases = [Case(attn, m, context) for m in cfg.methods] + [Case(attn, m + COMPILED, context) for m in cfg.compiled]
    for m in ("none", *cfg.methods):
        ref = Case(attn, PLAIN, kept_after_prefill(m, context, cfg))
        if ref not in cases:
            cases.append(ref)
    return cases


def batch_group(cfg: BenchConfig, attn: str, context: int) -> list[Case]:
    """:data:`BATCH_METHOD` at every batch size (compiled too when it is in ``compiled``), and its plain reference at
    the same batch sizes."""
    ref_len = kept_after_prefill(BATCH_METHOD, context, cfg)
    names = [BATCH_METHOD] + ([BATCH_METHOD + COMPILED] if BATCH_METHOD in cfg.compiled else [])
    return [Case(attn, m, context, b) for m in names for b in cfg.batches] + [
        Case(attn, PLAIN, ref_len, b) for b in cfg.batches
    ]


@dataclass(frozen=True)
class Group:
    """Cases measured together (prefilled one after the other, decoded step-interleaved) in one rep."""

    rep: int
    name: str  # "context" (methods + references at one context) or "batch"
    context: int
    cases: tuple[Case, ...]

    @property
    def label(self) -> str:
        """What rows of this group carry as ``group``: ``ctx<T>`` (a reference such as a plain cache of
        ``prompt_budget`` tokens is measured in every context group, next to the methods it is compared with)."""
        return "batch" if self.name == "batch" else context_label(self.context)


def context_label(context: int) -> str:
    return f"ctx{context}"


def plan(cfg: BenchConfig, max_positions: int) -> list[Group]:
    """The groups in run order: every rep covers everything, smallest contexts first; within a group the order of
    the cases rotates from rep to rep, so that no method is always first."""
    contexts = effective_contexts(cfg, max_positions)
    batch_context = effective_contexts(cfg.with_(contexts=(cfg.batch_context,)), max_positions)[0]
    order: list[Group] = []
    for rep in range(cfg.reps):
        for attn in cfg.attns:
            for context in contexts:
                order.append(Group(rep, "context", context, tuple(_rotate(context_group(cfg, attn, context), rep))))
            if BATCH_METHOD in cfg.methods and cfg.batches:
                cases = tuple(_rotate(batch_group(cfg, attn, batch_context), rep))
                order.append(Group(rep, "batch", batch_context, cases))
    return order
