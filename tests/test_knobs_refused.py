"""A compression knob is read or refused, and every knob and calibration file is bounded before the model loads.

Each refusal is one line naming the field (and the bound or the method's own knob), raised by the config check
(``evals.config.spec.check``, which ``evals.cli`` runs for every job of a sweep before the first starts)."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import time

import pytest
import torch

from evals.config.spec import check
from snapstream_core.api import compression_from_config
from snapstream_core.calibration import TENSORS, read_header, save_stats
from snapstream_core.methods import TriAttention
from tests.refusals import one_line_error
from tests.runner_utils import ROOT, compose_cfg
from tests.small_runs import NEEDLE

SMOLLM2 = ["model=smollm2_135m"]  # 8,192 positions (model.shape.max_positions)


def refused(args: list[str], pattern: str) -> str:
    with pytest.raises(ValueError) as err:
        check(compose_cfg(args), offline=True)
    text = one_line_error(err)
    assert pattern in text, text
    return text


# ---------------------------------------------------------------------------------------------- 1. read or refused
def test_the_mixed_budget_sweep_is_refused_for_rkv_before_any_model_loads(tmp_path):
    """The first sweep a researcher writes: R-KV's budget is ``compression.budget``, so ``prompt_budget`` would have
    run it at its default twice under two labels. The precheck names both rkv jobs, runs nothing, loads no torch."""
    args = ["-m", "compression=none,snapkv,tova,rkv", "compression.prompt_budget=128,256", f"out_root={tmp_path}"]
    code = ("import runpy, sys\n"
            f"sys.argv = ['evals.run', *{args!r}]\n"
            "try:\n    runpy.run_module('evals.run', run_name='__main__')\n"
            "except SystemExit as exc:\n    print('exit', exc.code, 'torch' in sys.modules)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    took = time.perf_counter() - start
    assert done.stdout.strip().splitlines()[-1] == "exit 2 False", (done.stdout, done.stderr)  # torch never imported
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: compression=rkv compression.prompt_budget={b}: compression.prompt_budget: rkv does not "
                      "read it; its budget is compression.budget (caps the whole cache, decoded tokens included)"
                      for b in (128, 256)], done.stderr
    assert not any(tmp_path.iterdir())  # no run directory, no Hydra log: no job started
    assert took < 60, took


@pytest.mark.parametrize("overrides, message", [
    (["compression=knorm", "compression.n_future=nan"],
     "compression.n_future: knorm does not read it (a knob of expected_attention, adakv); its knobs: prompt_budget, "
     "ratio, sinks, recent, positions, kv_dtype, kv_scale"),
    (["compression=rkv", "compression.offset_max_length=0"],
     "compression.offset_max_length: rkv does not read it (a knob of triattention)"),
    (["compression=snapkv", "compression.recent=64"], "compression.recent: snapkv does not read it"),
    (["compression=streaming_llm", "compression.budget=512"],
     "compression.budget: streaming_llm does not read it; its budget is compression.prompt_budget (caps the whole "
     "cache"),
    (["compression=rkv", "compression.ratio=0.5"], "compression.ratio: rkv does not read it; its budget is "
                                                   "compression.budget"),
    (["compression=expected_attention", "compression.n_future=nan"],
     "compression.n_future: must be an integer >= 1, got nan"),
])
def test_a_knob_the_method_does_not_read_is_refused_in_one_line(overrides, message):
    refused([*NEEDLE, *overrides], message)


def test_the_full_cache_accepts_any_knob_and_claims_none():
    """``compression=none`` reads no knob and accepts any (so sweeps can include it); nothing of them is recorded."""
    spec = check(compose_cfg([*NEEDLE, "compression=none", "compression.prompt_budget=128", "compression.budget=64"]),
                 offline=True)
    assert spec.method.knobs() == {"method": "none"} and spec.compression_tag == "none"


def test_the_sweep_table_states_each_jobs_real_budget():
    """The table's line of a job is what it ran: the full cache claims no budget, a budget left at its default is
    shown (``compression.budget=512``), a swept one as swept."""
    from evals.progress import job_label

    swept = {"compression", "compression.prompt_budget"}
    none = compose_cfg(["compression=none", "compression.prompt_budget=128"]).compression
    assert job_label(["compression=none", "compression.prompt_budget=128"], swept, dict(none)) == "compression=none"
    rkv = compose_cfg(["compression=rkv"]).compression
    assert job_label(["compression=rkv"], {"compression"}, dict(rkv)) == "compression=rkv compression.budget=512"
    snap = compose_cfg(["compression=snapkv", "compression.prompt_budget=128"]).compression
    assert (job_label(["compression=snapkv", "compression.prompt_budget=128"], swept, dict(snap))
            == "compression=snapkv compression.prompt_budget=128")


# ---------------------------------------------------------------------------------------------- 2. bounded
BIG = 10**30


@pytest.mark.parametrize("overrides, message", [
    (["compression=snapstream", f"compression.recent={BIG}"],
     "compression.recent: must be at most 16,777,216 (tokens: no model has more positions), got about 10**30"),
    (["compression=knorm", f"compression.recent={BIG}"], "compression.recent: must be at most 16,777,216"),
    (["compression=tova", f"compression.prompt_budget={BIG}"], "compression.prompt_budget: must be at most 16,777,216"),
    (["compression=expected_attention", f"compression.n_future={10**12}"],
     "compression.n_future: must be at most 16,777,216 (tokens: no model has more positions), got 1000000000000"),
    (["compression=rkv", f"compression.interval={10**12}"], "compression.interval: must be at most 16,777,216"),
    (["compression=snapkv", "compression.window=inf"], "compression.window: must be an integer >= 1, got inf"),
    (["compression=snapkv", "compression.ratio=nan"], "compression.ratio: must be a number in [0, 1)"),
])
def test_a_knob_past_any_model_is_refused_without_the_model(overrides, message):
    refused([*NEEDLE, *overrides], message)


@pytest.mark.parametrize("overrides, field", [
    (["compression=snapkv", "compression.prompt_budget=100000"], "prompt_budget"),
    (["compression=rkv", "compression.budget=100000"], "budget"),
    (["compression=snapstream", "compression.recent=100000"], "recent"),
    (["compression=snapkv_decode", "compression.interval=9000"], "interval"),
    (["compression=expected_attention", "compression.n_future=9000"], "n_future"),
])
def test_a_knob_past_the_models_positions_is_refused_before_weights_load(overrides, field):
    """SmolLM2 has 8,192 positions (known from its config, no weights): a budget past them keeps everything, a ring
    or a window past them is memory for tokens that never come."""
    refused([*SMOLLM2, *overrides], f"compression.{field}: must be at most 8,192, the positions of smollm2_135m "
                                    f"(model.shape.max_positions), got ")


def test_the_positions_are_read_where_the_model_states_them():
    """A random model is built from its ``arch``: its positions come from there, not from the planner's block."""
    refused([*NEEDLE, "model.arch.max_position_embeddings=48", "compression=snapkv", "compression.prompt_budget=64",
             "compression.window=16"], "compression.prompt_budget: must be at most 48, the positions of tiny_llama "
                                       "(model.arch.max_position_embeddings), got 64")


@pytest.mark.parametrize("given", ["compression.recent=9000", "compression.prompt_budget=9004"])
def test_a_streaming_footprint_past_the_positions_names_both_knobs(given):
    refused([*SMOLLM2, "compression=streaming_llm", given], "compression.prompt_budget: the footprint sinks + recent "
            "(4 + 9000 = 9004) must be at most 8,192, the positions of smollm2_135m")


def test_the_planner_refuses_a_job_with_an_unbounded_n_future(tmp_path, capsys):
    from evals.plan.__main__ import main

    assert main(["compression=expected_attention", f"compression.n_future={10**12}", f"out_root={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "compression.n_future: must be at most 16,777,216" in err and not (tmp_path / "plan.csv").exists()


# ---------------------------------------------------------------------------------------------- calibration files
def _good(path) -> bytes:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 8, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    save_stats(path, q_mean, q_mean.abs(), n_kv_heads=2, rope_theta=10000.0, rope_type="default")
    return path.read_bytes()


def _split(data: bytes) -> tuple[dict, bytes]:
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + size]), data[8 + size:]


def _join(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _deep(data: bytes) -> bytes:
    raw = b'{"__metadata__": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    return struct.pack("<Q", len(raw)) + raw


def _cut(data: bytes) -> bytes:
    return data[:-10]


def _past_end(data: bytes) -> bytes:
    header, body = _split(data)
    last = max(TENSORS, key=lambda name: header[name]["data_offsets"][1])  # the one whose data ends the file
    begin, end = header[last]["data_offsets"]
    header[last]["data_offsets"] = [begin + 64, end + 64]
    return _join(header, body)


def _nan(data: bytes) -> bytes:
    header, body = _split(data)
    begin = header["q_mean_imag"]["data_offsets"][0]
    body = body[:begin + 12] + struct.pack("<f", math.nan) + body[begin + 16:]
    return _join(header, body)


def _negative(data: bytes) -> bytes:
    header, body = _split(data)
    begin = header["q_abs_mean"]["data_offsets"][0]
    return _join(header, body[:begin] + struct.pack("<f", -1.0) + body[begin + 4:])


@pytest.mark.parametrize("craft, reason", [
    (_deep, "header nested deeper than 3 levels"),
    (_cut, "data_offsets [512, 768] outside the file's 758 data bytes"),  # 3 tensors (2, 4, 8) of 4-byte floats
    (_past_end, "data_offsets [576, 832] outside the file's 768 data bytes"),
    (_nan, "tensor q_mean_imag holds 1 values that are not finite (the first at flat index 3: nan)"),
    (_negative, "tensor q_abs_mean holds negative values"),
])
def test_a_calibration_file_is_checked_whole_at_check_time(tmp_path, craft, reason):
    """Each defect is one line naming ``compression.calibration`` and the reason, when the method is built (the
    config check), never a traceback after the model loads and never NaN scores."""
    path = tmp_path / "bad.safetensors"
    path.write_bytes(craft(_good(tmp_path / "good.safetensors")))
    with pytest.raises(ValueError) as err:
        read_header(path)
    text = one_line_error(err)
    assert text.startswith(f"compression.calibration: {path} is not a TriAttention calibration file") and reason in text
    with pytest.raises(ValueError, match=r"^compression\.calibration: "):
        TriAttention(calibration=str(path))
    refused(["model=tiny_llama", "compression=triattention", f"compression.calibration={path}"], reason)


def test_statistics_that_are_not_finite_are_never_written(tmp_path):
    q = torch.ones(2, 4, 8, dtype=torch.complex64)
    bad = q.abs().clone()
    bad[1, 2, 3] = math.inf
    with pytest.raises(ValueError, match=r"^q_abs_mean: 1 values are not finite"):
        save_stats(tmp_path / "x.safetensors", q, bad, n_kv_heads=2, rope_theta=10000.0, rope_type="default")
    assert not (tmp_path / "x.safetensors").exists()


def test_calibrate_refuses_a_reference_file_with_statistics_that_are_not_finite(tmp_path):
    from evals.calibrate import from_reference, model_config

    stats = {f"layer{layer:02d}_head{head:02d}": {"q_mean_real": torch.ones(8), "q_mean_imag": torch.zeros(8),
                                                "q_abs_mean": torch.ones(8)} for layer in range(2) for head in range(4)}
    stats["layer01_head02"]["q_mean_real"][5] = math.nan
    meta = {"sampled_heads": [[layer, head] for layer in range(2) for head in range(4)], "head_dim": 16,
            "rope_style": "half", "rope_type": "default"}
    torch.save({"metadata": meta, "stats": stats}, tmp_path / "ref.pt")
    with pytest.raises(ValueError, match=r"^q_mean: 1 values are not finite"):
        from_reference(model_config("tiny_llama"), tmp_path / "ref.pt", tmp_path / "ours.safetensors")
    assert not (tmp_path / "ours.safetensors").exists()


def test_the_python_api_refuses_a_knob_the_method_does_not_read():
    with pytest.raises(ValueError, match=r"^compression\.prompt_budget: rkv does not read it; its budget is "
                                         r"compression\.budget"):
        compression_from_config({"method": "rkv", "prompt_budget": 128})
    assert compression_from_config({"method": "rkv", "budget": 128}).budget == 128
