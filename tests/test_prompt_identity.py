"""Every file a task or its model reads to build prompts is in the run identity by content: editing a (copy of a)
needle haystack or a LongBench-v2 template changes the fingerprint, the sample cache's key and the generation
identity; the content, not where it lies, is the identity; and every file the tasks open while building and encoding
prompts is covered (recorded with Python's audit hook in a subprocess)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evals.config.checkpoint_hash import decides_tokenization, decides_tokens
from evals.execute.code_identity import (
    GENERATION_PACKAGES,
    GRADING_DISTRIBUTIONS,
    generation_id,
    generation_parts,
    grading_id,
    grading_parts,
)
from evals.execute.sample_cache import sample_key_base
from evals.run import run
from tasks.base import DATA_ENV, data_root
from tasks.registry import get_task
from tests.runner_utils import ROOT, compose_cfg
from tests.runner_utils import plan_cfg as plan
from tests.small_runs import NEEDLE

LONGBENCH = ["model=tiny_llama", "task=longbench_v2", "task.source=bundled", "task.limit=2"]
REPO_DATA = ROOT / "tasks" / "data"


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A copy of ``tasks/data`` that the tasks read (``$SNAPSTREAM_TASK_DATA``)."""
    copy = tmp_path / "data"
    shutil.copytree(REPO_DATA, copy)
    monkeypatch.setenv(DATA_ENV, str(copy))
    return copy


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def keys(overrides: list[str]) -> tuple[str, str, str]:
    """(fingerprint, the sample cache's key, generation identity) of a planned run (no weights)."""
    p = plan(compose_cfg(overrides))
    base = sample_key_base(p.identity, p.generation_id, p.grading_setup)
    return p.fingerprint, hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest(), p.generation_id


def test_editing_the_needle_haystack_changes_fingerprint_cache_key_and_generation_id(data_copy, monkeypatch):
    assert data_root() == data_copy.resolve()
    same = keys(NEEDLE)
    monkeypatch.delenv(DATA_ENV)
    assert keys(NEEDLE) == same  # the content is the identity, not the folder it lies in
    monkeypatch.setenv(DATA_ENV, str(data_copy))
    edit_haystack(data_copy)
    edited = keys(NEEDLE)
    assert all(a != b for a, b in zip(same, edited)), (same, edited)


def edit_haystack(data: Path) -> None:
    """Every "the" of the filler spelt "teh": the same length and spaces, so the same items (keys, depths, offsets),
    other prompts."""
    haystack = data / "needle" / "paul_graham_essays.json"
    essays = json.loads(haystack.read_text(encoding="utf-8"))
    essays["text"] = essays["text"].replace("the", "teh")
    haystack.write_text(json.dumps(essays), encoding="utf-8")


def test_an_edited_haystack_is_generated_again_never_served_from_old_rows(data_copy, tmp_path, monkeypatch):
    """The defect as a user met it: the same command after an edit said "nothing to do" over the old rows, and a new
    out_root sharing the sample cache served them (``cached_from``)."""
    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", str(tmp_path / "shared"))
    command = [*NEEDLE, "compression=none"]
    first = run(compose_cfg([*command, f"out_root={tmp_path / 'a'}"]))
    edit_haystack(data_copy)
    again = run(compose_cfg([*command, f"out_root={tmp_path / 'a'}"]))
    other = run(compose_cfg([*command, f"out_root={tmp_path / 'b'}"]))
    old, new = rows(first), rows(again)
    assert again != first and [r["item_id"] for r in new] == [r["item_id"] for r in old]
    assert not any("cached_from" in r for r in new)
    assert all(a["prompt_hash"] != b["prompt_hash"] for a, b in zip(old, new))  # the edit reached the prompts
    assert [r["cached_from"] for r in rows(other)] == [r["run_id"] for r in new]  # edited rows are reused as such


def test_editing_a_longbench_template_changes_fingerprint_cache_key_and_generation_id(data_copy):
    same = keys(LONGBENCH)
    template = data_copy / "longbench_v2" / "prompts" / "0shot.txt"
    text = template.read_bytes()
    template.write_bytes(text.replace(b"Choices:", b"Options:", 1))
    assert template.read_bytes() != text
    edited = keys(LONGBENCH)
    assert all(a != b for a, b in zip(same, edited)), (same, edited)


def test_a_data_root_that_is_not_a_folder_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"^\$SNAPSTREAM_TASK_DATA: not a folder"):
        keys(NEEDLE)


# the bundled items file each task reads on source=bundled: its items are hashed by content (data_sha256, and each
# item's hash in the sample cache's key), so it is not a prompt file
ITEM_FILES = {"lb": "longbench_v2/sample.jsonl", "aime": "aime24/aime24_sample.jsonl",
              "lcb": "livecodebench/sample.jsonl"}
RUNS = {
    "needle": ("needle", ["model=smollm2_135m", "task=needle", "task.key_kind=words", "task.n_items=2",
                          "task.context_tokens=128"]),
    "lb": ("longbench_v2", ["model=smollm2_135m", "task=longbench_v2", "task.source=bundled", "task.cot=true",
                            "task.limit=2"]),
    "aime": ("aime24", ["model=smollm2_135m", "task=aime24", "task.source=bundled", "task.limit=2"]),
    "lcb": ("livecodebench", ["model=smollm2_135m", "task=livecodebench", "task.source=bundled", "task.limit=2"]),
    "tiny": ("needle", ["model=tiny_llama", "task=needle", "task.n_items=1", "task.context_tokens=128"]),
}


def test_every_file_a_task_or_its_tokenizer_opens_to_build_prompts_is_in_the_identity(data_copy):
    from evals.config.models import embedded_dir

    args = [a for label, (_, overrides) in RUNS.items() for a in ("--", label, *overrides)][1:]
    out = subprocess.run([sys.executable, "-m", "tests.prompt_reads", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    opened = json.loads(out.stdout.strip().splitlines()[-1])
    model = embedded_dir().resolve()
    for label, (task_name, _) in RUNS.items():
        files = [Path(f) for f in opened[label]]
        assert not [f for f in files if f.is_relative_to(REPO_DATA)], "read tasks/data beside $SNAPSTREAM_TASK_DATA"
        declared = set(getattr(get_task(task_name), "PROMPT_FILES", ()))
        data = {str(f.relative_to(data_copy.resolve())) for f in files if f.is_relative_to(data_copy.resolve())}
        assert data - {ITEM_FILES.get(label)} <= declared, (label, data, declared)
        assert data or label == "tiny", label  # the seam is used (tiny: needle's files are read once, above)
        covers = decides_tokenization if label == "tiny" else decides_tokens
        from_model = [f.name for f in files if f.is_relative_to(model)]
        assert from_model and all(covers(name) for name in from_model), (label, from_model)


def test_the_identities_hold_the_package_versions_that_decide_tokens_and_verdicts():
    from importlib import metadata

    task = get_task("aime24")
    generation = generation_parts(task)["packages"]
    assert {"torch", "transformers", "tokenizers", "jinja2", "safetensors"} <= set(GENERATION_PACKAGES)
    assert generation["tokenizers"] == metadata.version("tokenizers")
    assert generation["jinja2"] == metadata.version("jinja2")
    grading = grading_parts(task, {})
    assert {"math-verify", "latex2sympy2_extended", "sympy"} <= set(GRADING_DISTRIBUTIONS)
    assert grading["packages"]["math-verify"] == metadata.version("math-verify")
    assert grading["packages"]["latex2sympy2_extended"] == metadata.version("latex2sympy2_extended")
    assert grading["python"].count(".") == 2
    # the identities are hashes of exactly these parts
    assert generation_id(task) == hashlib.sha256(
        json.dumps(generation_parts(task), sort_keys=True).encode()).hexdigest()[:16]
    assert grading_id(task, {}) == hashlib.sha256(
        json.dumps(grading, sort_keys=True, default=str).encode()).hexdigest()[:16]
