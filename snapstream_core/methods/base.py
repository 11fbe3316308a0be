"""What every method tells the cache: which prompt tokens to keep after prefill, and how decoding grows the cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the dataclasses import no torch: configs are checked before torch loads
    import torch

POSITIONS = ("original", "in_cache")
BUDGET_CAPS = ("none", "prompt", "cache")  # what a method's budget bounds (CompressionMethod.budget_cap)
POOLINGS = ("max", "avg")
GQA_AGGS = ("mean", "max")
MAX_TOKENS = 1 << 24  # 16,777,216: the most any token-count knob may be without a model (none has more positions)
# Knobs that count tokens of one sequence, bounded by the model's positions (CompressionMethod.check_context).
CONTEXT_KNOBS = ("prompt_budget", "budget", "recent", "window", "sinks", "interval", "n_future")
TAG = "tag"  # field metadata key: the knob's prefix in the run tag (``field(metadata={TAG: "cr"})``)


def tag_prefix(f: Field) -> str:
    """The knob's prefix in the run tag: ``metadata["tag"]`` if given, else the initials of its name
    (``prompt_budget`` -> ``pb``, ``first_k`` -> ``fk``, ``window`` -> ``w``)."""
    return f.metadata.get(TAG, "".join(word[0] for word in f.name.split("_") if word))


@dataclass(frozen=True)
class PrefillView:
    """What a layer exposes to a method at the end of its prefill attention.

    Shapes: ``query`` (B, H, w, D) post-RoPE queries of the last ``w = method.query_rows(T)`` positions (or more);
    ``keys`` (B, H_kv, T, D) post-RoPE keys; ``key_valid`` (B, T) bool, False on left padding; ``scaling`` the
    attention scale (1/sqrt(D) for Llama); ``values`` (B, H_kv, T, D); ``moments`` the running moments of the pre-RoPE
    queries (:class:`snapstream_core.moments.QueryMoments`) when ``method.query_moments(T)`` asks for them, else None;
    ``inv_freq`` (D/2,) the model's RoPE inverse frequencies (None when its angle is not linear in the position).
    """

    query: torch.Tensor
    keys: torch.Tensor
    key_valid: torch.Tensor
    scaling: float
    values: torch.Tensor | None = None
    moments: Any = None
    inv_freq: torch.Tensor | None = None


@dataclass(frozen=True)
class Selection:
    """Prompt tokens a layer keeps after prefill.

    ``scores`` (B, H_kv, T): priority of each prompt token (higher is kept first; ``-inf`` never kept unless there is
    room); ``n_keep`` tokens are kept per (row, KV head), of which the ``n_frozen`` with the highest priority form the
    frozen prefix and the rest seed the ring (StreamingLLM's recent tokens). ``indices`` (B, H_kv, n_keep) long,
    when given, are the kept tokens in the order the layer stores them (a method that orders its slots itself, as
    the decode-time methods store the references' score order); otherwise the kept tokens are stored in position
    order.
    """

    scores: torch.Tensor
    n_keep: int
    n_frozen: int
    indices: torch.Tensor | None = None


@dataclass(frozen=True)
class CompressionMethod:
    """Base of the method dataclasses. Subclasses set ``method`` and implement :meth:`select`.

    Every field is a knob and needs a default. ``tag_order`` orders the knobs in the run tag (the readable name of
    a run directory, ``evals/config/conf_store.py``); empty: the class's own fields in definition order, then the shared
    ones (``positions``). A field's tag prefix is ``field(metadata={"tag": ...})``, else its initials
    (:func:`tag_prefix`).
    """

    method: ClassVar[str] = "base"
    tag_order: ClassVar[tuple[str, ...]] = ()
    # Knobs that follow from the budget (the report's x axis), so they never tell two lines of the method apart.
    budget_derived: ClassVar[tuple[str, ...]] = ()
    # What the budget bounds (one of BUDGET_CAPS): "prompt", the kept prompt (decoded tokens are appended or held
    # in a ring beside it); "cache", the whole cache while decoding (generated tokens compete for the same slots);
    # "none", nothing (the full cache). Run names, the report and published references read it: a reference
    # matches a run only at the same method, budget and cap.
    budget_cap: ClassVar[str] = "prompt"
    # Whether the selection rotates queries by RoPE (ExpectedAttention): make_cache then refuses a model whose RoPE
    # angle is not linear in the position.
    reads_rope: ClassVar[bool] = False
    # The knob that holds the budget (what ``evals.search`` sweeps): ``prompt_budget``, or ``budget`` for the
    # whole-cache methods (``DecodeMethod``).
    budget_knob: ClassVar[str] = "prompt_budget"
    positions: str = field(default="original", metadata={TAG: ""})

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"compression.positions: must be one of {POSITIONS}, got {self.positions!r}")

    @property
    def ring(self) -> int | None:
        """Ring slots for decoded tokens; ``None`` means decoded tokens are appended (the cache grows)."""
        return None

    @property
    def compresses(self) -> bool:
        return True

    def footprint(self, prompt_len: int, new_tokens: int) -> int:
        """KV entries held per layer and KV head at the end of generation (the bound tests and rows check)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ geometry (the one place it is computed)
    def tokens_held(self, prompt_len: int, steps: int) -> int:
        """KV entries held per layer and KV head after the prefill of ``prompt_len`` tokens and ``steps`` decoded
        tokens written (``footprint`` at ``steps = max_new_tokens``)."""
        return self.footprint(prompt_len, steps)

    def peak_tokens(self, prompt_len: int, steps: int) -> int:
        """The most KV entries held at once while ``steps`` decoded tokens are written (``tokens_held`` at
        ``steps`` for the methods whose cache never shrinks)."""
        return self.tokens_held(prompt_len, steps)

    def row_memory(self, prompt_len: int, slots: int) -> dict[str, int]:
        """What a decode row holds beyond its K/V for this method, for the memory model (``memory.job_terms``):
        ``compacts`` (1: slot positions and a compaction), ``query_ring`` (queries per layer) and ``prefill_pairs``
        (key pairs per KV head the prompt cut scores pairwise); a compaction's scoring is the decode-time method's
        ``compaction_scratch``. None by default."""
        return {"compacts": 0, "query_ring": 0, "prefill_pairs": 0}

    def mean_tokens_held(self, prompt_len: int, gen_tokens: int) -> float:
        """Mean of ``tokens_held(T, k)`` over decoding steps ``k = 1..gen_tokens`` (``tokens_held(T, 0)`` when
        nothing was generated), for a cache that grows by one entry a step and then stays flat: found by bisection."""
        T, G = prompt_len, gen_tokens
        start = self.tokens_held(T, 0)
        if G <= 0:
            return float(start)
        lo, hi = 0, G  # the largest k with tokens_held(T, k) == start + k
        if self.tokens_held(T, G) == start + G:
            lo = G
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self.tokens_held(T, mid) == start + mid:
                    lo = mid
                else:
                    hi = mid
        growing = lo * start + lo * (lo + 1) // 2  # steps 1..lo: start + k
        flat = (G - lo) * self.tokens_held(T, lo)  # steps lo+1..G: as held after step lo
        return (growing + flat) / G

    def check_engine(self, where: str) -> None:
        """Raise a one-line ``ValueError`` when the method needs the engine and ``where`` (another decoding path,
        e.g. ``generate()``) cannot run it. Every method runs anywhere by default."""

    def kept(self, prompt_len: int) -> int:
        """Prompt tokens a layer keeps after its prefill selection."""
        return self.tokens_held(prompt_len, 0)

    def frozen(self, prompt_len: int) -> int:
        """Slots of the frozen prefix after prefill: the kept prompt (appending methods); ring methods keep the
        ring's share of the prompt apart and override this."""
        return self.kept(prompt_len)

    def prefill_slots(self, prompt_len: int) -> int:
        """KV slots per KV head a layer allocates when its selection is done (a ring is allocated whole)."""
        if self.ring is None:
            return self.kept(prompt_len)
        return self.frozen(prompt_len) + self.ring

    def slots(self, prompt_len: int, max_new_tokens: int) -> int:
        """KV slots per KV head of one decode row for a prompt of ``prompt_len`` tokens and ``max_new_tokens``: the
        kept prompt and the ``max_new_tokens - 1`` tokens fed back (appending methods; the last token is never fed
        back), or the prefix and the ring (ring methods, whatever ``max_new_tokens``)."""
        if self.ring is None:
            return self.kept(prompt_len) + max(max_new_tokens - 1, 0)
        return self.prefill_slots(prompt_len)

    def query_rows(self, prompt_len: int) -> int:
        """Post-RoPE query rows (the last ones) the prefill selection reads: none when nothing is selected; every
        row by default (a method that reads fewer says so)."""
        if not self.compresses or not self.needs_selection(prompt_len):
            return 0
        return prompt_len

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """fp32 buffers the selection's scoring holds at its peak beyond SnapKV's window scores (the memory model,
        :func:`snapstream_core.memory.prefill_terms`): ``(n, m)``, ``n`` of (H_kv, T, D) and ``m`` of (H, T) per
        row; (0, 0) by default."""
        return (0, 0)

    def query_moments(self, prompt_len: int) -> int | None:
        """Leading tokens of each row the running moments of the pre-RoPE queries skip, when the selection reads
        those moments (:attr:`PrefillView.moments`, summed over the prefill's chunks); None (the default): it
        reads none."""
        return None

    def keeps_all(self, prompt_len: int, new_tokens: int) -> bool:
        """Whether the method provably keeps every one of ``prompt_len + new_tokens`` tokens on the engine path, so
        its tokens equal the full cache's (docs/architecture.md, contract 1): the footprint holds them all and
        positions are the original ones (``positions=in_cache`` decodes through ``generate()``, another path).
        The full cache itself is the reference, never kept-all: the one rule the planner and the runner share."""
        return (self.compresses and self.positions == "original"
                and self.footprint(prompt_len, new_tokens) >= prompt_len + new_tokens)

    def needs_selection(self, prompt_len: int) -> bool:
        """Whether a prompt of ``prompt_len`` tokens (padded length) is longer than what the method keeps."""
        raise NotImplementedError

    def select(self, view: PrefillView) -> Selection:
        """Priorities of the prompt tokens of one layer (only called when :meth:`needs_selection`)."""
        raise NotImplementedError

    # Whether :meth:`check_shape` needs the model's shape (``evals.config.spec.check`` reads it only then).
    needs_shape: ClassVar[bool] = False
    # knobs that name a file the method reads at run time (TriAttention's calibration): a plan, which needs no
    # run-time data, notes one that is missing instead of refusing it (evals.config.spec.check, ``plan_only``)
    run_files: ClassVar[tuple[str, ...]] = ()
    run_files_doc: ClassVar[str] = ""  # how to make them, quoted by that note

    def check_shape(self, shape: Mapping[str, Any]) -> None:
        """Refuse (``ValueError``, one line) a model this configuration cannot run on, before weights load.
        ``shape``: ``n_layers, n_heads, n_kv_heads, head_dim`` and, when the model's config states them,
        ``rope_theta``, ``rope_type``."""

    def check_context(self, positions: int, model: str = "the model") -> None:
        """Refuse (``ValueError``, one line naming the field and the bound) a knob that counts more tokens than
        ``model`` (its name and where its positions are stated) has ``positions``: a budget (past it every prompt,
        or the whole sequence, is kept: the full cache under another name), a ring, a window, the sinks, the
        compaction interval, ExpectedAttention's future positions (:data:`CONTEXT_KNOBS`). The config check calls
        it with the model's positions, read from its config without weights, before anything loads.
        TriAttention's ``offset_max_length`` is left out: the reference scores offsets up to 65,536 on any model,
        and they cost ``log2`` of it."""
        knobs = self.knobs()
        for name in CONTEXT_KNOBS:
            value = knobs.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > positions:
                raise ValueError(f"compression.{name}: must be at most {positions:,}, the positions of {model}, "
                                 f"got {value}")

    def knobs(self) -> dict[str, Any]:
        """All knobs, with the method name first (for result rows)."""
        return {"method": self.method, **asdict(self)}

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def tag_fields(cls) -> list[Field]:
        """The knobs named in the run tag, in order: those :meth:`knobs` reports for the default instance (so
        :class:`NoCompression` has none), ordered by ``tag_order``, else own fields first, shared ones last."""
        applies = set(cls().knobs()) - {"method"}
        # ``metadata={TAG: None}``: not in the tag (a file path, say); the run's identity still holds it
        by_name = {f.name: f for f in fields(cls) if f.name in applies and f.metadata.get(TAG, "") is not None}
        shared = [f.name for f in fields(CompressionMethod)]
        order = list(cls.tag_order) or [n for n in by_name if n not in shared] + [n for n in shared if n in by_name]
        if sorted(order) != sorted(by_name):
            raise ValueError(f"{cls.__name__}.tag_order: must list each knob once ({', '.join(by_name)}), got {order}")
        return [by_name[n] for n in order]

    @classmethod
    def from_bench(cls, knobs: Mapping[str, Any]) -> CompressionMethod:
        """The method at a benchmark's shared budgets (``bench.config.BenchConfig.shared_knobs``: ``prompt_budget,
        recent, window, kernel, sinks``; every method at one KV footprint). Default: the knobs that are fields of
        the class, the others at their defaults."""
        names = cls.field_names()
        return cls(**{k: v for k, v in knobs.items() if k in names})


def check_positive(name: str, value: int, minimum: int = 1, maximum: int = MAX_TOKENS) -> None:
    """Refuse (one line naming the field and the bound) a knob that is not an integer in ``[minimum, maximum]``: a
    float, NaN, inf or bool, or a count of tokens past :data:`MAX_TOKENS` (the model-free bound; the model's own
    context is checked by :meth:`CompressionMethod.check_context` before weights load)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"compression.{name}: must be an integer >= {minimum}, got {value!r}")
    check_at_most(name, value, maximum)


def check_at_most(name: str, value: int, maximum: int = MAX_TOKENS) -> None:
    if value > maximum:
        shown = str(value) if len(str(value)) <= 24 else f"about 10**{len(str(value)) - 1}"
        raise ValueError(f"compression.{name}: must be at most {maximum:,} (tokens: no model has more positions), "
                         f"got {shown}")


def resolve_prompt_budget(method: CompressionMethod, default: int) -> None:
    """Check a method's exclusive ``ratio`` / ``prompt_budget`` knobs (kvpress's ``compression_ratio``: the share of
    each prompt dropped) and fill ``prompt_budget`` with ``default`` when neither is given (frozen dataclass)."""
    ratio, budget = method.ratio, method.prompt_budget
    if ratio is not None:
        if budget is not None:
            raise ValueError(f"compression.ratio: give compression.ratio ({ratio}) or compression.prompt_budget "
                             f"({budget}), not both")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise ValueError(f"compression.ratio: must be a number in [0, 1) (the share of each prompt dropped), "
                             f"got {ratio!r}")
    elif budget is None:
        object.__setattr__(method, "prompt_budget", default)


def sink_and_tail_scores(key_valid: torch.Tensor, sinks: int, tail: int) -> torch.Tensor:
    """Priorities (B, T) that keep the first ``sinks`` valid tokens of each row (2.0), then its last ``tail``
    tokens (1.0); everything else and padding are ``-inf``. Rows are left-padded, so the tail is the suffix."""
    import torch

    B, T = key_valid.shape
    rank = key_valid.long().cumsum(-1) - 1  # (B, T): index among the row's valid tokens
    scores = torch.full((B, T), float("-inf"), device=key_valid.device)
    if tail > 0:
        scores[:, max(T - tail, 0) :] = 1.0
    scores = scores.masked_fill(key_valid & (rank < sinks), 2.0)
    return scores.masked_fill(~key_valid, float("-inf"))
