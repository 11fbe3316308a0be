"""One stage of the GPU check in this process (started by :mod:`bench.gpu_check`, one process per stage):

    python -m bench.gpu_stages NAME [--tiny] [--no-compile] --result FILE [--context JSON] [--parent-pid PID] ...

First thing, it arranges to die with its parent (``--parent-pid``: ``prctl(PR_SET_PDEATHSIG)``,
:mod:`bench.gpu.process`) and writes its record to ``--result`` (:class:`bench.gpu.record.StageRecord`), which it
rewrites at every phase and figure, so a stage killed at its limit still says how far it got. Then it builds the
model (Llama-3.1-8B's shape with random bf16 weights on CUDA; a 2-layer fp32 model on the CPU with ``--tiny``) and
runs the stage's function (:mod:`bench.gpu.stages`) through the engine's public API. An error is the stage's
finding: it goes into the record, and the process exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu.record import StageRecord
from bench.gpu.table import COSTS, ORDER


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_stages")
    p.add_argument("name", choices=ORDER)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--memory-gib", type=float, default=80.0)
    p.add_argument("--max-rows", type=int, default=None)
    p.add_argument("--context", default="{}", help="JSON: figures earlier stages passed on")
    p.add_argument("--parent-pid", type=int, default=None, help="die with this process (the check)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one stage, its record written as it goes (errors included) to ``--result``."""
    started = time.perf_counter()
    a = parse_args(argv)
    if a.parent_pid is not None:
        from bench.gpu.process import die_with_parent

        die_with_parent(a.parent_pid)
    rec = StageRecord(a.result, a.name, note=COSTS[a.name].why, started=started)
    try:
        rec.phase("import")
        import torch  # noqa: F401 - imported here so that the phase names where the time goes
        import transformers  # noqa: F401

        from bench.gpu.context import Ctx
        from bench.gpu.model import build_model, versions
        from bench.gpu.stages import FUNCTIONS
        from snapstream_core.memory import device_usable_bytes

        usable = None if a.tiny else device_usable_bytes("cuda")
        rec.phase("model")
        model, device = build_model(a.tiny)
        rec.put(model_build_s=rec.elapsed() - rec["phases"]["model"], versions=versions())
        FUNCTIONS[a.name](Ctx(a, model, device, usable, json.loads(a.context), rec))
        rec.phase("done")
    except Exception as exc:  # noqa: BLE001 - the stage's finding; the parent runs the next stage in a new process
        text = str(exc).strip().splitlines()
        error: dict[str, Any] = {"error": f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")}
        rec.put(**error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
