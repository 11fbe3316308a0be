"""The GPU check's stages, most informative first, each with its expected cost and its limit.

The order is what a short run should return first: the headline path (SnapStream's decode at the planner's rows),
the baseline it is compared with (the full cache, and the engine's tokens against plain transformers), the
compaction graph (the decode-time methods' second graph and their compiled tokens), the equal-memory comparison
(two stages: the second needs the first's planned peak), the long prefill's memory, and the block mask's saving
last. ``est_s`` is the expected wall time of the stage's process (imports, model build, compile, measurement) and
``limit_s`` the time after which it is killed; on CUDA both are estimates until a GPU run measures them (the
records' ``wall_s`` and ``phases``). With ``--tiny`` they are this 2-core CPU's (shared), with a margin."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageCost:
    """A stage's place in the plan: what it tells (``why``), its expected seconds and its limit on CUDA and with
    ``--tiny``, and the stage whose passed-on figures it needs (``needs``)."""

    name: str
    why: str
    est_s: float
    limit_s: float
    tiny_est_s: float
    tiny_limit_s: float
    needs: str | None = None

    def cost(self, tiny: bool, limit_override: float | None = None) -> tuple[float, float]:
        """(estimate, limit) in seconds; ``limit_override`` (``--stage-limit-s``) replaces the limit and caps the
        estimate."""
        est, limit = (self.tiny_est_s, self.tiny_limit_s) if tiny else (self.est_s, self.limit_s)
        if limit_override is not None:
            return min(est, limit_override), limit_override
        return est, limit


TABLE: tuple[StageCost, ...] = (
    StageCost("snapstream_decode", "SnapStream's decode at the planner's rows: the method's own speed and memory",
              70, 90, 60, 300),
    StageCost("full_decode", "the full cache at the planner's rows (the baseline) and the engine's greedy tokens "
              "against plain transformers", 80, 100, 70, 360),
    StageCost("compaction", "R-KV's compaction graph (its share of the decode) and the decode-time methods' compiled "
              "tokens against eager", 110, 130, 300, 900),
    StageCost("equal_memory_full", "the full cache at 128k: its rows and tokens/s at a planned memory",
              60, 75, 45, 240),
    StageCost("equal_memory_snapstream", "SnapStream at 128k at the full cache's planned memory: the tokens/s ratio",
              60, 75, 45, 240, needs="equal_memory_full"),
    StageCost("prefill_120k", "a 120k-token prompt through the layer-major prefill: its time and peak memory",
              30, 45, 30, 180),
    StageCost("block_mask", "the per-row block mask: short rows' step against long rows' in one graph",
              80, 100, 70, 360),
)
ORDER = tuple(s.name for s in TABLE)
COSTS = {s.name: s for s in TABLE}
