"""The decode engine: per-item prefill, fixed decode rows that retire and refill, per-sample counter-based noise."""

from snapstream_core.engine.items import EngineItem, EngineStats, Finished
from snapstream_core.engine.loop import Engine
from snapstream_core.engine.noise import item_key, sample_key
from snapstream_core.engine.scheduler import Scheduler, StepCounts, Ticket

__all__ = ["Engine", "EngineItem", "EngineStats", "Finished", "Scheduler", "StepCounts", "Ticket", "item_key",
           "sample_key"]
