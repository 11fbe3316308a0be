"""What a stage function gets (:class:`Ctx`): the arguments, the model, its device, the memory usable at the start
(CUDA), the figures earlier stages passed on, and the record it fills as it goes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from bench.gpu.record import StageRecord
from bench.gpu.shapes import Shape, shape_of


@dataclass
class Ctx:
    args: argparse.Namespace
    model: Any
    device: str
    usable: float | None
    context: dict
    record: StageRecord

    @property
    def name(self) -> str:
        return self.record["name"]

    @property
    def shape(self) -> Shape:
        return shape_of(self.name, self.args.tiny)

    def put(self, **figures: Any) -> None:
        self.record.put(**figures)

    def phase(self, name: str) -> None:
        self.record.phase(name)
