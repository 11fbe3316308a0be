"""What both sides of the vLLM speed bench share: the job file and the result files. Standard library only.

Imported as ``bench.vllm_speed.common`` on our side and as ``common`` by ``theirs.py`` (run as a script from this
folder with vLLM's interpreter, which has none of our packages).

The job (``job.json``): ``model_dir``, ``prompts`` (lists of token ids, fed as ids by both sides), ``max_new_tokens``
(every sequence is forced to exactly this many tokens: EOS ignored on both sides), ``rows`` (the row counts:
sequences decoded at once), ``methods`` (ours, with their knobs). A result (``<engine>-<method>-r<rows>-rep<R>.json``)
holds the timings and, per sequence, the prompt ids' digest it was fed and the tokens it generated.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

JOB = "job.json"


def read_job(folder: Path) -> dict:
    return json.loads((Path(folder) / JOB).read_text())


def digest(ids) -> str:
    """A short digest of one sequence of token ids (what a side records it was fed)."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


def result_name(engine: str, method: str, rows: int, rep: int) -> str:
    return f"{engine}-{method}-r{rows}-rep{rep}.json"


def write_result(folder: Path, result: dict) -> Path:
    path = Path(folder) / result_name(result["engine"], result["method"], result["rows"], result["rep"])
    path.write_text(json.dumps(result))
    return path


def load() -> list[float]:
    """The 1-minute load average (rounded), or [] where the platform has none."""
    try:
        return [round(os.getloadavg()[0], 2)]
    except OSError:
        return []


def fed_problems(job: dict, result: dict) -> list[str]:
    """What differs between the job and what a side reports it ran: the prompt ids fed (by digest, in order), the
    number of sequences and each sequence's generated length (must be ``max_new_tokens``). Empty when it all matches."""
    want = [digest(p) for p in job["prompts"]]
    got = result["fed"]
    problems = []
    if got != want:
        bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
        problems.append(f"{result['engine']}: prompt ids differ from the job's ({len(got)} fed vs {len(want)} "
                        f"prompts; first differing {bad[:3]})")
    lengths = [len(t) for t in result["tokens"]]
    off = [i for i, n in enumerate(lengths) if n != job["max_new_tokens"]]
    if off:
        problems.append(f"{result['engine']}/{result['method']} r{result['rows']}: {len(off)} sequences not of "
                        f"{job['max_new_tokens']} tokens (e.g. #{off[0]}: {lengths[off[0]]})")
    return problems
