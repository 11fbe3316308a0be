"""The decode engine: per-item prefill, fixed decode rows that retire and refill, per-sample counter-based noise."""

from snapstream_core.engine.loop import Engine, EngineItem, EngineStats, Finished
from snapstream_core.engine.noise import item_key, sample_key
from snapstream_core.engine.scheduler import Job, Scheduler, StepCounts

__all__ = ["Engine", "EngineItem", "EngineStats", "Finished", "Job", "Scheduler", "StepCounts", "item_key",
           "sample_key"]
