"""Prompt provenance: every row stores ``prompt_hash``; the run's ``prompts.jsonl.gz`` maps it to the exact prompt.

A record holds what the backend turns into tokens: the task's ``messages`` (chat or raw text), the assistant
``prefill``, the ``stop`` strings and per-request ``gen`` settings, and the ``system_prompt`` the backend prepends
(``model.system_prompt``, for chat prompts of non-thinking models). Written once per distinct prompt, as one gzip
member per batch (flushed), so a killed run leaves at most a torn last member, which the next run cuts off.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import zlib
from pathlib import Path
from typing import Any

from evals.record.rundir import write_atomic_bytes
from tasks.base import Prompt

log = logging.getLogger(__name__)

PROMPTS = "prompts.jsonl.gz"


def prompt_record(prompt: Prompt, system_prompt: str | None) -> dict[str, Any]:
    """The exact input of a request (see the module docstring)."""
    return {
        "messages": prompt.messages,
        "prefill": prompt.prefill,
        "stop": list(prompt.stop),
        "gen": dict(prompt.gen or {}),
        "system_prompt": system_prompt if not isinstance(prompt.messages, str) else None,
    }


def prompt_hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def read_prompts(path: Path) -> dict[str, dict]:
    """``{prompt_hash: record}`` of every whole record (a torn tail is ignored)."""
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.endswith("\n"):
                    break
                rec = json.loads(line)
                out[rec["prompt_hash"]] = rec["prompt"]
    except (EOFError, OSError, zlib.error, json.JSONDecodeError, KeyError):
        log.warning("%s: dropping a torn tail left by an interrupted run", path)
    return out


class PromptStore:
    """Appends each new prompt of a run to ``prompts.jsonl.gz``; a torn tail is rewritten away on open."""

    def __init__(self, path: Path):
        self.path = path
        self.known = read_prompts(path)
        if path.is_file():  # rewrite from the whole records: drops a torn member so appends stay readable
            lines = "".join(json.dumps({"prompt_hash": h, "prompt": r}, ensure_ascii=False) + "\n"
                            for h, r in self.known.items())
            write_atomic_bytes(path, gzip.compress(lines.encode()))

    def add(self, records: list[dict[str, Any]]) -> list[str]:
        """Store the records not yet stored; returns the hash of each record, in order."""
        hashes, new = [], []
        for rec in records:
            h = prompt_hash(rec)
            hashes.append(h)
            if h not in self.known:
                self.known[h] = rec
                new.append(json.dumps({"prompt_hash": h, "prompt": rec}, ensure_ascii=False) + "\n")
        if new:
            with self.path.open("ab") as fh:
                fh.write(gzip.compress("".join(new).encode()))
                fh.flush()
        return hashes
