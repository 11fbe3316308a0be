"""A stage's record, written to its file as it grows: a stage stopped at its limit still says how far it got.

The file is replaced whole at each write (a temporary file renamed over it), so the parent, reading it after a kill,
sees the last complete record, never half of one. ``phase`` names what the stage is doing and ``phases`` when each
began (seconds since the stage's process started), e.g. ``import``, ``model``, ``plan``, ``warm-up (compile)``,
``timed run``, ``agreement``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class StageRecord(dict):
    """The record of one stage (a dict of JSON-able figures) and the file it is kept in."""

    def __init__(self, path: Path, name: str, note: str = "", started: float | None = None):
        super().__init__(name=name, path="engine", note=note, phase="start", phases={"start": 0.0})
        self.file, self.started = Path(path), time.perf_counter() if started is None else started
        self.last_write = 0.0
        self.write()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def put(self, **figures: Any) -> None:
        """Add figures and write the record."""
        self.update(figures)
        self.write()

    def phase(self, name: str) -> None:
        """The stage enters phase ``name`` (written at once: a stop inside it names it)."""
        self["phase"] = name
        self["phases"][name] = round(self.elapsed(), 2)
        self.write()

    def write(self, every_s: float = 0.0) -> None:
        """Write the record (skipped when the last write is less than ``every_s`` seconds old)."""
        now = time.perf_counter()
        if every_s and now - self.last_write < every_s:
            return
        self["stage_s"] = round(self.elapsed(), 3)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self, default=str) + "\n")
        os.replace(tmp, self.file)
        self.last_write = now


def read_record(path: Path) -> dict[str, Any]:
    """The last record a stage wrote ({} when it wrote none)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
