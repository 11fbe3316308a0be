"""``backend=replay``: score completions produced elsewhere (vLLM, another harness, a production system).

Input: JSONL lines ``{"item_id": ..., "sample_idx": 0, "completion": "..."}`` (``sample_idx`` defaults to 0). A
``samples.jsonl`` of this harness is valid input: its measured columns (``gen_tokens``, ``finish_reason``,
``prompt_tokens``, ``kv_tokens_peak``, ...) are carried over. No model weights are loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path

from evals.execute.backends.base import Backend, Request, Sample
from evals.record.rows import check_measured
from evals.record.text import repair_surrogates
from tasks.base import iter_jsonl

log = logging.getLogger(__name__)

CARRIED = ("kv_tokens_peak", "kv_bytes_peak", "kv_prefill_bytes_peak", "kv_bytes_after_prefill", "kv_bytes_final")


def read_completions(path: str | Path) -> dict[tuple[str, int], dict]:
    """``{(item_id, sample_idx): record}``; raises ``ValueError`` naming the file and line on bad input: an
    ``item_id`` that is not a string or integer, a ``sample_idx`` that is not an integer >= 0 (``1.9`` or ``true``
    are refused, not coerced), a measured column that is not a number or null, a ``finish_reason`` that is not a
    string or null."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"backend.path: no such file: {path}")
    records: dict[tuple[str, int], dict] = {}
    for lineno, rec in iter_jsonl(path, field="backend.path"):
        where = f"backend.path: {path} line {lineno}"
        rec = repair_surrogates(rec)  # a lone "\ud800" cannot be written as UTF-8: U+FFFD instead
        if "item_id" not in rec or "completion" not in rec:
            raise ValueError(f"{where}: needs fields item_id and completion")
        if not isinstance(rec["completion"], str):
            raise ValueError(f"{where}: completion must be a string")
        item_id, idx = rec["item_id"], rec.get("sample_idx", 0)
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or str(item_id).strip() == "":
            raise ValueError(f"{where}: item_id must be a non-empty string or an integer")
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise ValueError(f"{where}: sample_idx must be an integer >= 0")
        check_measured(rec, where)
        if rec.get("finish_reason") is not None and not isinstance(rec["finish_reason"], str):
            raise ValueError(f"{where}: finish_reason must be a string or null")
        key = (str(item_id), idx)
        if key in records:
            raise ValueError(f"{where}: duplicate (item_id, sample_idx) {key}")
        records[key] = rec
    return records


class ReplayBackend(Backend):
    """Completions of a file, matched to the run's items by ``(item_id, sample_idx)``.

    ``partial=False`` (``backend.partial``, the default): every completion must match an item of the run, so a
    file for another task, split or limit is refused rather than silently scored on its overlap."""

    name = "replay"
    tokenizer = None
    loads_weights = False
    replays = True
    needs_prompts = False
    supports_followup = False
    batch_size = 256  # nothing is generated: large chunks only bound the rows graded at once

    def __init__(self, path: str | Path, partial: bool = False):
        self.path = Path(path)
        self.partial = partial
        self.records = read_completions(path)
        self.by_item: dict[str, list[int]] = {}
        for item_id, idx in sorted(self.records):
            self.by_item.setdefault(item_id, []).append(idx)
        self.missing: list[str] = []

    def check_matches(self, item_ids: list[str], model: str) -> None:
        """Refuse completions that match no item (unless ``partial``), a file matching none, and completions that a
        harness row says another model produced (rows are labelled with ``model``)."""
        wanted = set(item_ids)
        unmatched = sorted({i for i, _ in self.records} - wanted)
        if len(unmatched) == len({i for i, _ in self.records}):
            raise ValueError(
                f"backend.path: none of the {len(self.records)} completions in {self.path} matches an item of this "
                f"task (file ids: {', '.join(unmatched[:3])}; task ids: {', '.join(sorted(wanted)[:3])})"
            )
        if unmatched and not self.partial:
            raise ValueError(
                f"backend.path: {len(unmatched)} item id(s) in {self.path} match no item of this run "
                f"(first: {', '.join(unmatched[:3])}); pass backend.partial=true to score only the matching ones"
            )
        made_by = sorted({str(r["model"]) for r in self.records.values() if r.get("model") is not None})
        if made_by and made_by != [model]:
            raise ValueError(
                f"model: the completions in {self.path} were made by {', '.join(made_by[:3])}, not {model}; "
                f"pass model=<that model's config> so the rows carry the right label"
            )

    def samples_for(self, item_id: str, n: int) -> list[int]:
        found = self.by_item.get(item_id, [])
        if not found:
            self.missing.append(item_id)
        return found

    def generate(self, requests: list[Request]) -> list[list[Sample]]:
        out = []
        for req in requests:
            samples = []
            for idx in req.sample_idx:
                rec = self.records[(str(req.item.item_id), idx)]
                samples.append(
                    Sample(
                        sample_idx=idx,
                        completion=rec["completion"],
                        prompt_tokens=rec.get("prompt_tokens"),
                        gen_tokens=rec.get("gen_tokens"),
                        finish_reason=rec.get("finish_reason"),
                        latency_s=rec.get("latency_s"),
                        kv={k: rec[k] for k in CARRIED if k in rec},
                    )
                )
            out.append(samples)
        return out

    def meta(self) -> dict:
        """For ``meta.json``: the samples per item the file actually holds (not ``gen.n_samples``, which a replay
        does not use)."""
        counts = [len(v) for v in self.by_item.values()]
        return {"replay": {"path": str(self.path), "completions": len(self.records), "items": len(counts),
                           "samples_per_item_min": min(counts, default=0),
                           "samples_per_item_max": max(counts, default=0)}}

    def report_missing(self, n_items: int) -> None:
        if self.missing:
            log.warning(
                "replay: %d of %d items have no completion in the file and are left out (first: %s)",
                len(self.missing), n_items, ", ".join(self.missing[:5]),
            )
