"""backend=vllm: the config check, seeds and request building, the identity, the worker protocol (a real subprocess:
tests/fake_vllm_worker.py given as backend.python), a whole run through the fake worker, and the real vLLM on the
embedded model when a vLLM Python is there (SNAPSTREAM_VLLM_PYTHON or .venv-vllm; skipped otherwise)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from evals.config.spec import check
from evals.execute.backends.vllm_requests import kv_figures, sample_seed, sampling_params
from evals.execute.backends.worker_process import WorkerError, WorkerProcess
from snapstream_core.sampling import SamplingConfig
from tests.runner_utils import ROOT, compose_cfg, plan_cfg

FAKE = Path(__file__).with_name("fake_vllm_worker.py")
NEEDLE = ["model=smollm2_135m", "task=needle", "task.context_tokens=256", "task.n_items=2", "gen.max_new_tokens=6"]


@pytest.fixture
def fake_python(tmp_path):
    """An executable that runs the fake worker with this interpreter, as ``backend.python`` would run vLLM's."""
    path = tmp_path / "fake-python"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def vllm_cfg(python: str, *extra: str):
    return compose_cfg(["backend=vllm", f"backend.python={python}", *NEEDLE, *extra])


# --- seeds and requests -------------------------------------------------------------------------------------------

def test_a_samples_seed_is_a_function_of_its_key_alone():
    seeds = {sample_seed(s, item, i) for s in (0, 1) for item in ("a", "b") for i in (0, 1)}
    assert len(seeds) == 8 and all(0 <= s < 2**62 for s in seeds)
    assert sample_seed(0, "a", 1) == sample_seed(0, "a", 1)


def test_sampling_params_carry_every_gen_knob_the_end_tokens_and_stop_strings():
    sampling = SamplingConfig(max_new_tokens=99, temperature=0.6, top_p=0.95, top_k=20)
    p = sampling_params(sampling, 7, [2, 5], ("\n\n",), seed=11, logprobs=2)
    assert (p["temperature"], p["top_p"], p["top_k"], p["max_tokens"], p["seed"]) == (0.6, 0.95, 20, 7, 11)
    assert p["stop_token_ids"] == [2, 5] and p["stop"] == ["\n\n"] and p["detokenize"] and p["logprobs"] == 2
    greedy = sampling_params(SamplingConfig(), 3, [2], (), seed=0)
    assert greedy["temperature"] == 0.0 and not greedy["detokenize"] and "logprobs" not in greedy


def test_kv_figures_are_the_full_caches():
    assert kv_figures(100, 5, 10) == {"kv_tokens_peak": 104, "kv_bytes_peak": 1040, "kv_bytes_final": 1040}


# --- the config check ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, field", [
    (["compression=snapkv"], "compression:"),
    (["compression=streaming_llm"], "compression:"),
    (["gen.rows=4"], "gen.rows:"),
    (["gen.compile=true"], "gen.compile:"),
    (["gen.batch_size=4"], "gen.batch_size:"),
    (["backend.tensor_parallel_size=0"], "backend.tensor_parallel_size:"),
    (["backend.gpu_memory_utilization=1.5"], "backend.gpu_memory_utilization:"),
    (["backend.cpu_kv_cache_gib=-1"], "backend.cpu_kv_cache_gib:"),
    (["backend.dtype=int8"], "backend.dtype:"),
    (["backend.enforce_eager=maybe"], "backend.enforce_eager:"),
])
def test_the_check_refuses_what_vllm_cannot_do_in_one_line(fake_python, extra, field):
    with pytest.raises(ValueError) as err:
        check(vllm_cfg(fake_python, *extra))
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_a_missing_vllm_python_says_how_to_make_one(tmp_path):
    with pytest.raises(ValueError, match=r"^backend.python: no executable at .*make setup-vllm"):
        check(vllm_cfg(str(tmp_path / "nope" / "python")))


def test_random_weights_are_refused(fake_python):
    cfg = compose_cfg(["backend=vllm", f"backend.python={fake_python}", "model=tiny_llama"])
    with pytest.raises(ValueError, match=r"^model.source: backend=vllm"):
        check(cfg)


def test_a_python_without_vllm_is_refused_before_weights_load():
    with pytest.raises(ValueError, match=r"^backend.python: vllm is not installed in .*make setup-vllm"):
        plan_cfg(vllm_cfg(sys.executable))  # our venv: no vllm


# --- identity -----------------------------------------------------------------------------------------------------

def test_the_backend_is_part_of_the_run_and_generation_identity(fake_python, tmp_path):
    hf = plan_cfg(compose_cfg(NEEDLE))
    vl = plan_cfg(vllm_cfg(fake_python))
    assert hf.fingerprint != vl.fingerprint and hf.run_dir != vl.run_dir
    assert hf.generation_id != vl.generation_id
    assert "python" not in vl.identity["backend"]  # where vLLM lies is not what it runs
    other = tmp_path / "elsewhere"
    other.write_text(Path(fake_python).read_text())
    other.chmod(0o755)
    assert plan_cfg(vllm_cfg(str(other))).fingerprint == vl.fingerprint
    sampled = plan_cfg(vllm_cfg(fake_python, "gen.temperature=0.7"))
    assert sampled.identity["gen"]["sampler"] == "seed-per-sample-v1"


# --- the worker protocol ------------------------------------------------------------------------------------------

def test_the_protocol_survives_log_output_on_the_workers_stdout(fake_python):
    w = WorkerProcess([fake_python, "worker.py"], name="fake")
    try:
        reply = w.call({"op": "load", "model": "m", "engine": {"dtype": "float32"}})
        assert reply["ok"] and reply["engine"] == {"dtype": "float32"}
        with pytest.raises(WorkerError, match="unknown op 'nope'"):
            w.call({"op": "nope"})
    finally:
        w.close()
    assert w.proc.poll() == 0


def test_a_dying_worker_is_one_line_quoting_its_stderr(fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_DIE", "1")
    w = WorkerProcess([fake_python, "worker.py"], name="backend=vllm")
    try:
        with pytest.raises(WorkerError) as err:
            w.call({"op": "generate", "requests": []})
    finally:
        w.close()
    msg = str(err.value)
    assert "exit code 3" in msg and "out of memory while generating" in msg and "\n" not in msg


def test_the_real_worker_in_a_python_without_vllm_says_so_in_one_line():
    """The worker file itself (standard library only until it loads vLLM), run by this venv's python, which has no
    vllm: its versions say so, and a load is refused with the setup hint, the worker still answering."""
    from evals.execute.backends.vllm import WORKER

    w = WorkerProcess([sys.executable, str(WORKER)], name="backend=vllm")
    try:
        with pytest.raises(WorkerError, match=r"vllm is not importable in .*make setup-vllm") as err:
            w.call({"op": "load", "model": "m", "engine": {}})
        assert "\n" not in str(err.value)
        with pytest.raises(WorkerError, match="unknown op"):
            w.call({"op": "nope"})
    finally:
        w.close()


def test_a_missing_interpreter_is_one_line(tmp_path):
    with pytest.raises(WorkerError, match="cannot start"):
        WorkerProcess([str(tmp_path / "none"), "worker.py"], name="fake")


def test_a_worker_whose_harness_dies_ends_itself(fake_python, tmp_path, monkeypatch):
    """The worker's stdin closing (the harness killed with -9) ends it: no orphan."""
    import subprocess

    log = tmp_path / "pids"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from evals.execute.backends.worker_process import WorkerProcess;"
        "w = WorkerProcess([sys.argv[2], 'worker.py'], name='x'); w.call({'op': 'load', 'model': 'm', 'engine': {}});"
        "print('up', flush=True); time.sleep(60)"), str(ROOT), fake_python], stdout=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "up"
    pid = int(log.read_text().split()[0])
    parent.kill()
    parent.wait()
    for _ in range(300):
        if not _running(pid):
            return
        time.sleep(0.1)
    pytest.fail(f"worker {pid} outlived its harness")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (ended, not yet reaped: a test process that became a subreaper, as the
    sandbox's tests make theirs, reaps its adopted orphans only when it waits) has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --- a whole run through the fake worker --------------------------------------------------------------------------

def test_a_run_writes_vllm_rows_decoded_as_the_hf_backend_does_and_resumes(fake_python, tmp_path, monkeypatch):
    from evals.config.encode import encode_prompt
    from evals.config.models import load_tokenizer
    from evals.execute.backends.hf import cut_at_stop
    from evals.run import run
    from tasks.base import decode_keeping_think_tags

    monkeypatch.setenv("FAKE_VLLM_EOS", "1")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(tmp_path / "pids"))
    cfg = vllm_cfg(fake_python, f"out_root={tmp_path}")
    run_dir = run(cfg)
    (pid,) = map(int, (tmp_path / "pids").read_text().split())
    with pytest.raises(ProcessLookupError):  # the worker ended with its run (the next job of a sweep needs the GPU)
        os.kill(pid, 0)
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["backend"] for r in rows} == {"vllm"}
    tok, spec = load_tokenizer(cfg.model), check(cfg)
    for item, r in zip(spec.task_module.load(cfg.task), rows):
        # the fake returns prompt tokens -6..-2 and the end token: the row holds them decoded as hf decodes
        prompt = spec.task_module.prompt(item, cfg.model, cfg=cfg.task, tokenizer=tok)
        ids = encode_prompt(tok, cfg.model, prompt)
        assert r["item_id"] == str(item.item_id) and r["prompt_tokens"] == len(ids)
        assert r["gen_tokens"] == 6 and r["finish_reason"] == "stop" and r["kv_tokens_peak"] == len(ids) + 5
        want = cut_at_stop(decode_keeping_think_tags(tok, ids[-6:-1] + [tok.eos_token_id]), tuple(prompt.stop))
        assert r["completion"] == want
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["vllm"]["versions"]["vllm"] == "fake-vllm==0.0"
    assert run(cfg) == run_dir  # complete: nothing to do, no worker started
    assert len((run_dir / "samples.jsonl").read_text().splitlines()) == 2


# --- the real vLLM ------------------------------------------------------------------------------------------------

def vllm_python() -> str | None:
    given = os.environ.get("SNAPSTREAM_VLLM_PYTHON")
    if given:
        return given
    local = ROOT / ".venv-vllm" / "bin" / "python"
    return str(local) if local.is_file() else None


@pytest.mark.slow
@pytest.mark.skipif(vllm_python() is None, reason="no vLLM Python: run `make setup-vllm` or set "
                    "SNAPSTREAM_VLLM_PYTHON=<python with vllm>")
def test_real_vllm_generates_the_embedded_models_tokens_as_our_engine(tmp_path):
    """Two needle items, 8 greedy tokens: vLLM (float32, CPU or GPU) writes rows whose completions equal our
    engine's (the engine check, bench/engine_check, compares more items and explains ties)."""
    from evals.run import run

    common = [*NEEDLE[:-1], "gen.max_new_tokens=8", f"out_root={tmp_path}"]
    ours = run(compose_cfg(common))
    theirs = run(compose_cfg(["backend=vllm", f"backend.python={vllm_python()}", "backend.max_model_len=1024",
                              "backend.enforce_eager=true", "backend.cpu_kv_cache_gib=1", *common]))
    assert ours != theirs

    def completions(d):
        return {json.loads(x)["item_id"]: json.loads(x)["completion"] for x in (d / "samples.jsonl").open()}

    assert completions(ours) == completions(theirs)
    assert {json.loads(x)["backend"] for x in (theirs / "samples.jsonl").open()} == {"vllm"}
