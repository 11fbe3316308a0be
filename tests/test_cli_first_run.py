"""The command line on a user's first runs: a bad value refused in a second without torch, Ctrl-C as one line, a
finished run that says its score (and exits at once when re-run), replay and the sweep check without torch or the
network, each warning logged once."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.logonce import OnceFilter
from tests.runner_utils import ROOT, TINY, compose_cfg

# Runs the entry point in-process, then reports whether torch / transformers were imported.
PROBE = """
import runpy, sys
sys.argv = ["evals.run", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("evals.run", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("PROBE", code, "torch" in sys.modules, "transformers" in sys.modules)
"""


def _probe(args: list[str], timeout: int = 120) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("PROBE ")]
    return proc, line.split()[1:]


@pytest.mark.parametrize("arg, message", [
    ("gen.temperature=abc", "error: gen.temperature: expected a finite number, got 'abc'"),
    ("gen.max_new_tokens=1.5", "error: gen.max_new_tokens: expected an integer, got 1.5"),
])
def test_a_bad_value_is_one_line_naming_the_knob_and_torch_is_not_imported(arg, message, tmp_path):
    proc, (code, torch_loaded, transformers_loaded) = _probe([*TINY, arg, f"out_root={tmp_path}"])
    assert proc.stderr.strip().splitlines() == [message]
    assert code == "2" and torch_loaded == "False" and transformers_loaded == "False"
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.slow  # 22 s on 2 cores (make test under 10 minutes); tests/test_cpus.py checks each entry point's imports
def test_the_paper_grid_check_is_offline_and_imports_no_torch():
    script = ("import sys; from evals.cli import validate; "
              "print('BAD', validate(['-m', '+experiment=paper'])); print('TORCH', 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # a port nobody serves: any request to the hub would fail loudly
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=env)
    assert "BAD []" in proc.stdout and "TORCH False" in proc.stdout, proc.stdout + proc.stderr


def test_a_finished_run_prints_its_score_and_a_rerun_loads_no_weights(tmp_path, caplog, monkeypatch):
    import evals.execute.generate as generate
    from evals.run import run as run_cfg

    cfg = compose_cfg([*TINY, "task=needle", "task.limit=2", "task.context_tokens=128", "gen.max_new_tokens=4",
                       f"out_root={tmp_path}"])
    with caplog.at_level(logging.INFO):
        run_dir = run_cfg(cfg)
    text = caplog.text
    assert "result: needle · tiny_llama · none" in text and "accuracy (%): " in text and "2 items, 2 samples" in text
    assert "95% CI (wilson)" in text and "a pipeline check, not a finding" in text
    res = json.loads((run_dir / "results.json").read_text())
    assert set(res["results"]["needle"]) >= {"accuracy,none", "accuracy_stderr,none"}
    assert res["n-samples"]["needle"] == {"original": 2, "effective": 2} and res["small_n"] is True

    def no_backend(*args, **kwargs):
        raise AssertionError("a complete run must not build a backend")

    monkeypatch.setattr(generate, "make_backend", no_backend)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert run_cfg(cfg) == run_dir
    assert "nothing to do" in caplog.text and "result: needle" in caplog.text


def test_ctrl_c_prints_one_line_keeps_the_rows_and_exits_130(tmp_path):
    args = [*TINY, "task=needle", "task.n_items=400", "task.context_tokens=128", "gen.max_new_tokens=4",
            f"out_root={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "evals.run", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    samples: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        samples = [p for p in tmp_path.rglob("samples.jsonl") if p.stat().st_size > 0]
        if samples:
            break
        time.sleep(0.2)
    assert samples, "no row written in time"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    kept = sum(1 for line in samples[0].read_text().splitlines() if line.strip())
    assert err.strip().splitlines()[-1] == f"interrupted: {kept} rows kept; the same command resumes"
    assert "Traceback" not in err and kept >= 1


def test_a_replay_imports_neither_torch_nor_transformers(tmp_path):
    completions = tmp_path / "c.jsonl"
    completions.write_text("".join(json.dumps({"item_id": f"needle-0-{i}", "completion": "1234567"}) + "\n"
                                   for i in range(3)))
    proc, (code, torch_loaded, transformers_loaded) = _probe(
        [*TINY, "task=needle", "task.n_items=3", "task.context_tokens=128", "backend=replay",
         f"backend.path={completions}", f"out_root={tmp_path / 'out'}"])
    assert code in ("0", "None"), proc.stderr
    assert torch_loaded == "False" and transformers_loaded == "False"
    [meta] = list((tmp_path / "out").rglob("meta.json"))
    assert "/replay/fp-" in meta.as_posix()  # the directory names what ran, not gen.n_samples
    replay = json.loads(meta.read_text())["replay"]
    assert (replay["samples_per_item_min"], replay["samples_per_item_max"], replay["items"]) == (1, 1, 3)


def test_each_warning_is_logged_once_per_process():
    once = OnceFilter()
    record = lambda msg, level=logging.WARNING: logging.LogRecord("lib", level, __file__, 1, msg, None, None)  # noqa: E731
    assert once.filter(record("deprecated")) and not once.filter(record("deprecated"))
    assert once.filter(record("another")) and once.filter(record("info", logging.INFO))
    assert once.filter(record("info", logging.INFO))  # INFO is never deduplicated
