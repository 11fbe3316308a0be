"""What every method tells the cache: which prompt tokens to keep after prefill, and how decoding grows the cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from snapstream_core.policies import POLICIES, AppendPolicy, RaggedPolicy, RingPolicy, StoragePolicy
from snapstream_core.policies.kv_format import KV_DTYPES, KV_SCALES, KVFormat
from snapstream_core.views import PrefillView, Selection

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
class CompressionMethod:
    """Base of the method dataclasses. Subclasses set ``method`` and ``policy`` (their storage), give the numbers the
    policy is built from (:meth:`kept`; ``ring``/:meth:`frozen` for a ring, :meth:`kept_cap` for ragged budgets) and
    implement :meth:`needs_selection` and :meth:`select`; the geometry is the policy's (:meth:`storage`).

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
    # Where the entries live (snapstream_core.policies.POLICIES): "append", "ring", "compacting" or "ragged". The
    # policy owns the geometry, the memory terms, the eager cache layer and the engine's row schedule; the method
    # gives it plain numbers (:meth:`storage`) and scores.
    policy: ClassVar[str] = "append"
    # Whether the selection rotates queries by RoPE (ExpectedAttention): make_cache then refuses a model whose RoPE
    # angle is not linear in the position.
    reads_rope: ClassVar[bool] = False
    # The knob that holds the budget (what ``evals.search`` sweeps): ``prompt_budget``, or ``budget`` for the
    # whole-cache methods (``DecodeMethod``).
    budget_knob: ClassVar[str] = "prompt_budget"
    positions: str = field(default="original", metadata={TAG: ""})
    # How the kept entries are stored (snapstream_core.policies.kv_format): the model's dtype, or FP8 E4M3 with
    # per-row scales over the whole layer (tensor), per KV head (head) or fixed at 1.0 (one, vLLM's default for a
    # checkpoint without KV scales). Left out of knobs() at their defaults, so the identity of a run in the model's
    # dtype is what it was before these knobs existed.
    kv_dtype: str = field(default="auto", metadata={TAG: "kv"})
    kv_scale: str | None = field(default=None, metadata={TAG: "ks"})

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"compression.positions: must be one of {POSITIONS}, got {self.positions!r}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"compression.kv_dtype: must be one of {', '.join(KV_DTYPES)} (auto: the model's dtype, "
                             f"bf16 on the 8B models), got {self.kv_dtype!r}")
        if self.kv_scale is not None and self.kv_dtype != "fp8_e4m3":
            raise ValueError(f"compression.kv_scale: only read with compression.kv_dtype=fp8_e4m3 (kv_dtype is "
                             f"{self.kv_dtype}), got {self.kv_scale!r}")
        if self.kv_dtype == "fp8_e4m3":
            if self.kv_scale is None:
                object.__setattr__(self, "kv_scale", "tensor")
            if self.kv_scale not in KV_SCALES:
                raise ValueError(f"compression.kv_scale: must be one of {', '.join(KV_SCALES)}, got "
                                 f"{self.kv_scale!r}")

    @property
    def kv_format(self) -> KVFormat:
        """How this instance stores K/V (the planner's bytes per slot, the cache's codec)."""
        if self.kv_dtype == "fp8_e4m3":
            return KVFormat("fp8_e4m3", scale=self.kv_scale)
        return KVFormat()

    def kv_knobs(self) -> dict[str, Any]:
        """The storage knobs a run's identity and rows carry: none in the model's dtype."""
        if self.kv_dtype == "auto":
            return {}
        return {"kv_dtype": self.kv_dtype, "kv_scale": self.kv_scale}

    @property
    def ring(self) -> int | None:
        """Ring slots for decoded tokens (the ``ring`` policy); ``None``: no ring."""
        return None

    @property
    def compresses(self) -> bool:
        return True

    # ------------------------------------------------------------------ storage: the policy owns the geometry
    @property
    def storage_kind(self) -> str:
        """The storage policy of this instance: :attr:`policy`, unless a knob chooses another (a ring)."""
        return self.policy

    def layer_class(self) -> type:
        """The eager cache layer class of this instance's storage policy (``snapstream_core.layer.layer_for``)."""
        kind = self.storage_kind
        if kind not in POLICIES:
            raise ValueError(f"{type(self).__name__}.policy: must be one of {tuple(POLICIES)}, got {kind!r}")
        return POLICIES[kind].layer_class()

    def kept(self, prompt_len: int) -> int:
        """Prompt entries a layer keeps after its prefill selection, per KV head (the mean over layers and heads
        for a ragged method): the method's budget rule, the one number every policy is built from."""
        raise NotImplementedError

    def frozen(self, prompt_len: int) -> int:
        """Entries of the kept prompt a ring never overwrites: all of them by default (a ring starts empty)."""
        return self.kept(prompt_len)

    def kept_cap(self, prompt_len: int) -> int:
        """A ragged method's bound on the prompt entries any head of any layer keeps: the slots every head is
        padded to (what is allocated). Default: the prompt (a safe bound); a method that knows a tighter one says
        so."""
        return prompt_len

    def storage(self, prompt_len: int) -> StoragePolicy:
        """The storage policy for a prompt of ``prompt_len`` tokens, from plain numbers."""
        T, kind = prompt_len, self.storage_kind
        if kind == "append":
            return AppendPolicy(T, self.kept(T))
        if kind == "ring":
            return RingPolicy(T, self.kept(T), n_frozen=self.frozen(T), ring=self.ring)
        if kind == "ragged":
            kept = self.kept(T)
            return RaggedPolicy(T, kept, cap=max(min(self.kept_cap(T), T), kept))
        raise ValueError(f"{type(self).__name__}.policy: {kind!r} needs its own storage() (one of {tuple(POLICIES)})")

    def footprint(self, prompt_len: int, new_tokens: int) -> int:
        """KV entries held per layer and KV head at the end of generation (the bound tests and rows check)."""
        return self.storage(prompt_len).footprint(new_tokens)

    def tokens_held(self, prompt_len: int, steps: int) -> int:
        """KV entries held per layer and KV head after the prefill of ``prompt_len`` tokens and ``steps`` decoded
        tokens written."""
        return self.storage(prompt_len).tokens_held(steps)

    def peak_tokens(self, prompt_len: int, steps: int) -> int:
        """The most KV entries held at once while ``steps`` decoded tokens are written."""
        return self.storage(prompt_len).peak_tokens(steps)

    def row_memory(self, prompt_len: int, slots: int) -> dict[str, int]:
        """What a decode row holds beyond its K/V, for the memory model (``memory.job_terms``): the policy's
        ``compacts``/``query_ring``/``pairs``/``prefill_pairs`` (:meth:`StoragePolicy.row_memory`)."""
        return self.storage(prompt_len).row_memory(slots)

    def mean_tokens_held(self, prompt_len: int, gen_tokens: int) -> float:
        """Mean of ``tokens_held(T, k)`` over decoding steps ``k = 1..gen_tokens`` (the policy's)."""
        return self.storage(prompt_len).mean_tokens_held(gen_tokens)

    def check_engine(self, where: str) -> None:
        """Raise a one-line ``ValueError`` when the method needs the engine and ``where`` (another decoding path,
        e.g. ``generate()``) cannot run it. Every method runs anywhere by default."""

    def prefill_slots(self, prompt_len: int) -> int:
        """KV slots per KV head a layer allocates when its selection is done (the policy's)."""
        return self.storage(prompt_len).prefill_slots

    def slots(self, prompt_len: int, max_new_tokens: int) -> int:
        """KV slots per KV head of one decode row for a prompt of ``prompt_len`` tokens and ``max_new_tokens``
        (the policy's: what a row allocates)."""
        return self.storage(prompt_len).slots(max_new_tokens)

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
        return (self.compresses and self.positions == "original" and not self.kv_format.quantized
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
        knobs = {"method": self.method, **asdict(self)}
        if self.kv_dtype == "auto":  # the model's dtype: as before the storage knobs existed
            del knobs["kv_dtype"], knobs["kv_scale"]
        return knobs

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
