"""``python -m evals.list``: every task, method (with its knobs), model, experiment and backend, one line each, read
from the registries and the config folder."""

from __future__ import annotations

import subprocess
import sys

from evals.cli import options
from evals.list import lines
from snapstream_core.methods import METHODS
from tasks.registry import TASKS
from tests.runner_utils import ROOT
from tests.test_new_method import KeepFirst


def test_every_registered_name_is_one_line_with_its_description_or_knobs(monkeypatch):
    monkeypatch.setitem(METHODS, "keep_first", KeepFirst)
    out = lines()
    for prefix, names in (("task=", TASKS), ("compression=", METHODS), ("model=", options("model")),
                          ("+experiment=", options("experiment")), ("backend=", options("backend"))):
        for name in names:
            (line,) = [x for x in out if x.split()[0] == f"{prefix}{name}"]
            assert len(line.split(None, 1)) == 2, line  # a description or the knobs follow
    (listed,) = [x for x in out if x.split()[0] == "compression=keep_first"]
    assert "first_k=16" in listed
    assert [x for x in out if x.split()[0] == "compression=snapstream"][0].count("prompt_budget=") == 1


def test_no_line_names_an_issue_an_internal_file_or_an_interpolation():
    text = "\n".join(lines())
    for leak in ("issue", "${", "tasks/", "evals/", "snapstream_core/", "conf/"):
        assert leak not in text, leak


def test_the_module_runs_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "evals.list"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "tasks (task=NAME):", proc.stderr


def test_the_readme_opens_with_the_two_commands_then_the_list_command():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make eval", "make test"]
    assert text.index("python -m evals.list") < text.index("## Common tasks")


def test_methods_show_their_effective_defaults_and_hf_is_the_decode_engine():
    """``prompt_budget=1024`` and ``recent=1020`` (what a run uses), not the ``None`` of a derived knob."""
    out = {x.split()[0]: x for x in lines() if x.startswith("  ")}
    assert "prompt_budget=1024" in out["compression=snapkv"] and "prompt_budget=1024" in out["compression=snapstream"]
    assert "recent=1020" in out["compression=streaming_llm"] and "prompt_budget=None" not in "".join(out.values())
    for name, cls in METHODS.items():
        shown = dict(kv.split("=", 1) for kv in out[f"compression={name}"].split()[1:] if "=" in kv)
        assert shown == {k: str(v) for k, v in cls().knobs().items() if k in shown}
    assert "decode engine" in out["backend=hf"]
    assert lines()[-1].endswith("python -m evals.run --cfg job --resolve [overrides]")


def test_every_method_is_described_in_a_sentence_before_its_knobs():
    out = {x.split()[0]: x for x in lines() if x.startswith("  compression=")}
    assert set(out) == {f"compression={name}" for name in METHODS}
    for name, line in out.items():
        text = line.split("]", 1)[1].split("; knobs: ")[0].strip()
        assert len(text.split()) >= 5 and "``" not in text, line  # a sentence, read from the method's module
    assert "R-KV: redundancy-aware KV compression" in out["compression=rkv"]
    assert "TriAttention: keys scored against calibrated query statistics" in out["compression=triattention"]
    assert out["compression=none"].endswith("; knobs: none")


def test_the_shared_storage_knobs_are_listed_with_every_value_and_its_meaning(monkeypatch):
    from dataclasses import dataclass
    from typing import ClassVar

    from snapstream_core.policies.kv_format import KV_DTYPES, KV_SCALES, KVFormat

    @dataclass(frozen=True)
    class QuantFirst(KeepFirst):  # a method with a quantized format of its own, as KIVI has
        method: ClassVar[str] = "quant_first"

        @property
        def kv_format(self) -> KVFormat:
            return KVFormat("kivi", bits=2, group_size=32, residual=128)

    monkeypatch.setitem(METHODS, "quant_first", QuantFirst)
    out = lines()
    by_first = {x.split()[0]: x for x in out if x.startswith("  ")}
    for knob, values in (("kv_dtype", KV_DTYPES), ("kv_scale", KV_SCALES)):
        for value in values:
            line = by_first[f"compression.{knob}={value}"]
            assert len(line.split(None, 1)) == 2, line  # its meaning follows
    assert "stores K/V as kivi2/g32/r128" in by_first["compression=quant_first"]
    assert "stores K/V" not in by_first["compression=snapkv"]
    (quantized,) = [x for x in out if x.strip().startswith("quantized methods")]
    assert "quant_first" in quantized and "snapkv" not in quantized
    if "kivi" in METHODS:  # the KIVI method, once registered
        assert "stores K/V as kivi" in by_first["compression=kivi"] and "kivi" in quantized
