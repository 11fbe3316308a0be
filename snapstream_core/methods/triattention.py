"""TriAttention: keys scored against calibrated query statistics (a trigonometric series), no attention weights.

Mao et al. 2026, "TriAttention" (arXiv 2604.04921); we follow WeianMao/triattention c3744ee6,
``triattention/methods/triattention.py`` (``TriAttention``, ``apply_triattention_patch``) with the settings its
runner gives it (``scripts/cli.py``; ``triattention/configs/extra_config/triattention_per_head_pruning.yaml``):
``per_head_pruning``, ``count_prompt_tokens``, ``slack_budget_trigger``, ``triattention_normalize_scores``,
``divide_length`` 128, ``triattention_frequency_window`` 65,536, ``score_aggregation`` mean, the prompt kept
(``allow_prefill_compression`` false). The scores are :mod:`snapstream_core.triattention_scores`; the statistics a
calibration file (:mod:`snapstream_core.calibration`, written by ``python -m evals.calibrate``).

Schedule (the slack trigger): the cache, prompt included, grows to ``budget + interval`` entries; the step that
writes the last of them attends over all, then the cache keeps the prompt and the best ``budget - prompt`` decoded
tokens, so it compacts every ``interval`` tokens after the first time. No recent window is protected.

Differences, measured in tests/test_triattention_fidelity.py: the reference adds ``U(0, 1e-6)`` noise from a
generator seeded per generation (``pruning_seed``) to the normalised scores to break ties; we add none, so exact ties
go to the lower slot. A prompt of ``budget`` tokens or more keeps the prompt and drops every decoded token at each
compaction (the reference then keeps only the first ``budget`` prompt tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from snapstream_core.methods.base import TAG, CompressionMethod, check_at_most, check_positive
from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from snapstream_core.memory import Arch

PRUNINGS = ("per_head", "per_layer_per_head")


@dataclass(frozen=True)
class TriAttention(DecodeMethod):
    """Knobs: ``budget`` entries per layer and KV head for the whole cache; ``interval`` tokens between
    compactions; ``calibration`` the query-statistics file of the model (required; not in the run tag, its content
    is in the run's identity); ``offset_max_length`` the farthest future offset scored (offsets 1, 2, 4, ...);
    ``score_aggregation`` mean|max over offsets; ``normalize_scores`` z-normalise each head's scores over the
    decoded tokens; ``pruning`` per_head (each KV head keeps one set of tokens in every layer: the mean over layers
    of the max over its query heads, the protocol's ``per_head_pruning``) | per_layer_per_head (each layer and KV
    head on its own: ``per_layer_perhead_pruning``). ``window`` is 0 and ``protect_prompt`` true, as the reference
    runs it."""

    method: ClassVar[str] = "triattention"
    compact_trigger: ClassVar[str] = "slack"  # CompactingPolicy.trigger: the reference's slack_budget_trigger
    tag_order: ClassVar[tuple[str, ...]] = (
        "budget", "interval", "window", "offset_max_length", "score_aggregation", "normalize_scores", "pruning",
        "protect_prompt", "positions",
    )
    window: int = 0
    protect_prompt: bool = True
    calibration: str | None = field(default=None, metadata={TAG: None})
    offset_max_length: int = field(default=65536, metadata={TAG: "off"})
    score_aggregation: str = field(default="mean", metadata={TAG: ""})
    normalize_scores: bool = field(default=True, metadata={TAG: "norm"})
    pruning: str = field(default="per_head", metadata={TAG: ""})

    def __post_init__(self) -> None:
        CompressionMethod.__post_init__(self)  # DecodeMethod's checks but for window: TriAttention protects none
        if not isinstance(self.interval, int) or isinstance(self.interval, bool) or self.interval <= 0:
            raise ValueError(f"compression.interval: must be an integer > 0, got {self.interval!r}")
        check_at_most("interval", self.interval)
        check_positive("window", self.window, minimum=0)
        check_positive("budget", self.budget, minimum=self.window + 1)
        check_positive("offset_max_length", self.offset_max_length)
        if self.protect_prompt is not True:
            raise ValueError(f"compression.protect_prompt: triattention keeps the prompt (the reference's "
                             f"allow_prefill_compression: false), got {self.protect_prompt!r}")
        if self.score_aggregation not in ("mean", "max"):
            raise ValueError(f"compression.score_aggregation: must be mean or max, got {self.score_aggregation!r}")
        if not isinstance(self.normalize_scores, bool):
            raise ValueError(f"compression.normalize_scores: must be true or false, got {self.normalize_scores!r}")
        if self.pruning not in PRUNINGS:
            raise ValueError(f"compression.pruning: must be one of {PRUNINGS}, got {self.pruning!r}")
        if self.positions != "original":
            raise ValueError(f"compression.positions: {self.method} compacts in the engine, which keeps original "
                             f"positions; got {self.positions!r}")
        if self.calibration is not None and str(self.calibration).strip().lower() in ("", "none", "null"):
            raise ValueError(f"compression.calibration: required, the model's query statistics (a file: python -m "
                             f"evals.calibrate model=NAME writes one; docs/triattention.md), got {self.calibration!r}")
        if self.calibration is not None:
            from snapstream_core.calibration import read_header

            read_header(self.calibration)  # missing or unreadable: one line, before anything loads
        object.__setattr__(self, "_loaded", {})

    # ------------------------------------------------------------------ the model it is calibrated for
    needs_shape: ClassVar[bool] = True
    run_files: ClassVar[tuple[str, ...]] = ("calibration",)
    run_files_doc: ClassVar[str] = "python -m evals.calibrate model=NAME writes it (docs/triattention.md)"

    def check_shape(self, shape: Mapping[str, Any]) -> None:
        """Refuse (one line) a missing calibration or one made for another model shape (layers, heads, KV heads,
        head dim, RoPE theta and type as far as the model's config states them)."""
        from snapstream_core.calibration import FIELD, check_for_model

        if self.calibration is None:
            raise ValueError(f"{FIELD}: required, the model's query statistics (python -m evals.calibrate "
                             "model=NAME writes one; docs/triattention.md)")
        check_for_model(self.calibration, shape)

    # ------------------------------------------------------------------ schedule: the slack trigger (the policy's)
    def cap(self, prompt_len: int) -> int:
        return max(self.budget, prompt_len + self.window)

    # ------------------------------------------------------------------ scores
    def compact_scores(self, view: CompactView) -> torch.Tensor:
        """(R, H_kv, S) one layer's scores: z-normalised per query head over the decoded tokens held, max over each
        KV group (the reference's ``per_layer_perhead_pruning``, layer_perhead_aggregation max)."""
        from snapstream_core.triattention_scores import geometric_offsets, group_max, head_scores, normalized

        q_real, q_imag, q_abs_mean = self._stats(view.keys.device)
        if view.inv_freq is None:
            raise ValueError("compression=triattention: the model has no RoPE inverse frequencies to un-rotate keys")
        R, H_kv, S, _ = view.keys.shape
        H = q_abs_mean.shape[1]
        now = view.positions.masked_fill(~view.valid, -1).amax(-1).amax(-1) + 1  # (R,): tokens seen
        layer = view.layer_idx
        scores = head_scores(view.keys, now, (q_real[layer], q_imag[layer]), q_abs_mean[layer], view.inv_freq,
                             geometric_offsets(self.offset_max_length), aggregation=self.score_aggregation)  # (R, H, S)
        decoded = view.valid & (view.positions >= view.prompt_len[:, None, None])
        if self.normalize_scores:
            scores = normalized(scores, decoded.repeat_interleave(H // H_kv, dim=1))
        return group_max(scores, H_kv)

    def compact_scores_layers(self, views: list[CompactView]) -> list[torch.Tensor]:
        """Every layer's scores at one compaction; ``per_head``: each layer gets the mean over layers of
        :meth:`compact_scores` (``_select_per_head_independent``), so a KV head keeps the same tokens everywhere."""
        per_layer = [self.compact_scores(v) for v in views]
        if self.pruning == "per_layer_per_head":
            return per_layer
        import torch

        mean = torch.stack(per_layer).mean(0)
        return [mean] * len(views)

    def compaction_scratch(self, arch: Arch, slots: int) -> int:
        """Every layer's fp32 scores so far beside one layer's (fp32 key copies and per-head scores,
        ``memory.triattention_layer_bytes``); ``per_head`` then stacks the L layers' scores and takes their mean."""
        from snapstream_core.memory import FLOAT32, triattention_layer_bytes

        per_layer = arch.n_kv_heads * slots * FLOAT32
        offsets = self.offset_max_length.bit_length()  # 1, 2, 4, ... <= max (geometric_offsets), no torch import
        scoring = (arch.n_layers - 1) * per_layer + triattention_layer_bytes(arch, slots, offsets)
        if self.pruning == "per_layer_per_head":
            return scoring
        return max(scoring, (2 * arch.n_layers + 1) * per_layer)

    def prepare(self, device: Any) -> None:
        """Read the calibration onto ``device`` before the compaction compiles (file reads do not trace)."""
        self._stats(device)

    def _stats(self, device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q_mean's real and imaginary parts, q_abs_mean), each (L, H, F) float32, of the calibration, read once
        per device."""
        key = str(device)
        if key not in self._loaded:
            from snapstream_core.calibration import load_stats

            if self.calibration is None:
                raise ValueError("compression.calibration: required (python -m evals.calibrate model=NAME)")
            stats = load_stats(self.calibration, device)
            self._loaded[key] = (stats.q_mean.real.contiguous(), stats.q_mean.imag.contiguous(), stats.q_abs_mean)
        return self._loaded[key]
