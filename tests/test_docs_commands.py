"""Every command the README and docs/*.md show (code blocks and inline code) runs as pasted: each ``python -m evals.*``
command composes and passes the entry point's own checks in this process (``evals.cli.validate`` for ``evals.run``,
``evals.plan``'s main into a temporary folder, ``evals.search``'s option and combination checks, ``evals.calibrate``'s
argument parse and model config, ``evals.power``'s arguments), and each ``make`` command is a target whose dry run
(``make -n``) works, its own ``evals`` commands checked the same way. No model loads, no data is read, no network.

Commands with a placeholder (``<dir>``, ``NAME``, ``[overrides]``, ``...``) are not runnable as pasted and are only
listed (:func:`test_the_commands_left_out_are_only_those_with_a_placeholder`); commands that name a file the user
brings (``task.path=data.json``, ``backend.path=completions.jsonl``) must fail on that file's key and nothing else."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
EVALS = re.compile(r"(?:^|\s)(?:\S*/)?python3? -m (evals(?:\.\w+)+)(.*)$")
MAKE = re.compile(r"^make ([a-z][\w-]*)(.*)$")
PLACEHOLDER = re.compile(r"<[^<>\s]*>|\.\.\.|…|\b(?:NAME|FILE|DIR|KEY|VALUE|PATH)\b")
ASSIGN = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")  # a shell variable set in a code block (docs/results.md's ARGS)
# A file the user brings, named in a pasted command: the command must compose and be refused on this key only.
USER_FILES = {"task.path": ("data.json",), "backend.path": ("completions.jsonl",), "from_reference": ("ds_llama8b.pt",),
              "text": ("book.txt",),
              # written by the command before it in the same code block (evals.calibrate ... out=...)
              "compression.calibration": ("/tmp/tiny.safetensors", "/calibration/smollm2_135m.safetensors")}
# Commands the docs show being refused (an example of the one-line error): refused, naming this key.
REFUSED = {"compression=none,snapkv,tova,rkv compression.prompt_budget=128,256": "compression.prompt_budget",
           "+experiment=paper plan.memory_gib=40": "evals.plan exited 2"}
# The shell variables of the docs' loops and job arrays, at their first value.
LOOP_VARS = {"k": "0", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "8"}
# Made by `make setup-vllm`, the command before them in their code block: a backend=vllm command without its own
# backend.python must compose and be refused, if at all, for that Python only.
MADE_BY_SETUP = {"backend=vllm": "backend.python"}
SLOW = ("+experiment=paper",)  # the whole 72-job grid: every combination composed (test_plan.py plans it too)


def _commands_in(text: str) -> list[str]:
    """The ``python -m evals.*`` and ``make`` command lines of a markdown text: each line of a fenced block
    (backslash continuations joined, ``# comments`` and a shell prompt dropped) and each inline code span."""
    found = []
    for block in FENCE.findall(text):
        env = {"HOME": os.environ.get("HOME", "/root"), **LOOP_VARS}
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            assigned = ASSIGN.match(line)
            if assigned:
                env[assigned[1]] = " ".join(shlex.split(assigned[2], comments=True))
                continue
            found.append(re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], m[0]), line))
    body = FENCE.sub("", text)
    found += [span.strip() for span in INLINE.findall(body)]
    out = []
    for line in found:
        try:
            tokens = _inner(shlex.split(line, comments=True))
        except ValueError:  # unbalanced quotes: prose, not a command
            continue
        if tokens and re.fullmatch(r"(?:\S*/)?python3?", tokens[0]):
            tokens[0] = "python"  # .venv/bin/python and python: one command
        line = " ".join(shlex.quote(t) for t in tokens)
        if EVALS.search(line) or MAKE.match(line):
            out.append(line)
    return out


def _inner(tokens: list[str]) -> list[str]:
    """The command a shell wrapper runs: ``sbatch ... --wrap='CMD'`` gives CMD, ``for k in ...; do CMD & done``
    (the shards of docs' "Many GPUs") gives CMD; other lines are left as they are."""
    for t in tokens:
        if t.startswith("--wrap="):
            return _inner(shlex.split(t.removeprefix("--wrap=")))
    start = next((i for i, t in enumerate(tokens) if re.fullmatch(r"(?:\S*/)?python3?", t)), None)
    if start is None or start == 0:
        return tokens
    rest = tokens[start:]
    end = next((i for i, t in enumerate(rest) if t in ("&", "&&", ";", "|") or t.endswith(";")), len(rest))
    return rest[:end]


def commands() -> list[tuple[str, str]]:
    """``(doc name, command)`` for every command of the docs, each once."""
    seen: dict[str, str] = {}
    for doc in DOCS:
        for cmd in _commands_in(doc.read_text(encoding="utf-8")):
            seen.setdefault(cmd, doc.name)
    return [(doc, cmd) for cmd, doc in seen.items()]


def _has_placeholder(tokens: list[str]) -> bool:
    """A value to fill in (``<dir>``, ``NAME``, ``...``) or an optional part of a synopsis (``[overrides]``)."""
    return any(PLACEHOLDER.search(t.split("=", 1)[-1]) or t.startswith("[") for t in tokens)


def _user_file(tokens: list[str]) -> str | None:
    for made, key in MADE_BY_SETUP.items():
        if made in tokens and not any(t.startswith(f"{key}=") for t in tokens):
            return key
    for t in tokens:
        key, _, value = t.partition("=")
        if value.endswith(USER_FILES.get(key.lstrip("+"), ("\0",))) and not (REPO / value).exists():
            return key.lstrip("+")
    return None


def check_evals(module: str, args: list[str], tmp_path: Path) -> str | None:
    """None when ``python -m <module> <args>`` passes its entry point's checks; else the first refusal."""
    if module == "evals.run":
        from evals.cli import validate

        overrides = [a for a in args if a not in ("--resolve",)]
        if "--cfg" in overrides:  # --cfg job|hydra|all: printed by Hydra from the same composition
            at = overrides.index("--cfg")
            overrides = overrides[:at] + overrides[at + 2:]
        bad = validate(overrides)
        return bad[0] if bad else None
    if module == "evals.plan":
        from evals.plan.__main__ import main

        code = main([*args, f"out_root={tmp_path}"])
        return None if code == 0 else f"evals.plan exited {code}"
    if module == "evals.search":
        from evals.search.__main__ import _combos
        from evals.search.options import split_args

        opts, rest = split_args(args)
        _combos(rest, opts)
        return None
    if module == "evals.calibrate":
        from evals.calibrate import model_config, parse

        model_config(parse(args)["model"])
        return None
    if module == "evals.power":
        from evals.power import parse_args

        parse_args(args)
        return None
    if module in ("evals.report", "evals.list"):
        if module == "evals.list":
            from evals.list import lines

            assert lines()
        return None if all(not a.startswith("-") and "=" not in a for a in args) and len(args) <= 1 else \
            f"{module} takes one folder, got {args}"
    if module == "evals.lm_eval_cli":
        from evals.lm_eval_cli import precheck

        precheck(args)  # exits 2 on a bad knob or task
        return None
    return f"{module}: no check for this entry point (add one to tests/test_docs_commands.py)"


def run_checks(cmd: str, tmp_path: Path) -> str | None:
    """None when ``cmd`` (an ``evals`` or ``make`` command line) is fine; else why not."""
    tokens = shlex.split(cmd)
    m = EVALS.search(cmd)
    if m and not cmd.startswith("make "):
        module, args = m[1], shlex.split(m[2])
        if not args and module in ("evals.power", "evals.search", "evals.calibrate"):
            importlib.import_module(module)  # a name in prose (`python -m evals.power`), not a command to paste
            return None
        try:
            return check_evals(module, args, tmp_path)
        except Exception as exc:  # noqa: BLE001 - a refusal (ValueError, UserError, SystemExit) is the finding
            return f"{type(exc).__name__}: {exc}"
    target = MAKE.match(cmd)[1]
    proc = subprocess.run(["make", "-n", *tokens[1:]], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    if proc.returncode != 0:
        return f"make -n {target}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    for line in proc.stdout.splitlines():  # the target's own evals commands (make eval: the two sweeps, the report)
        inner = EVALS.search(line)
        if inner and not _has_placeholder(shlex.split(inner[2])):
            why = run_checks(line.strip(), tmp_path)
            if why:
                return f"{line.strip()}: {why}"
    return None


CASES = commands()


def test_the_docs_show_commands_of_every_kind():
    kinds = {EVALS.search(c)[1] if not c.startswith("make ") else "make" for _, c in CASES}
    assert {"evals.run", "evals.plan", "evals.search", "evals.report", "evals.calibrate", "make"} <= kinds
    assert len(CASES) > 40


@pytest.fixture(scope="module")
def made_by_the_docs(tmp_path_factory):
    """What an earlier command of a code block writes before the next reads it: the R1 calibration file
    (``evals.calibrate model=r1_distill_llama_8b ...``, then ``+experiment=reasoning_budget``), in a cache folder of
    the test's own (``SNAPSTREAM_CACHE``, read by the experiment's config)."""
    import torch

    from snapstream_core.calibration import save_stats

    cache = tmp_path_factory.mktemp("cache")
    q = torch.zeros(32, 32, 64, dtype=torch.complex64)  # R1-Distill-Llama-8B: 32 layers, 32 heads, head dim 128
    save_stats(cache / "calibration" / "r1_distill_llama_8b.safetensors", q, q.abs(), n_kv_heads=8,
               rope_theta=500000.0, rope_type="llama3")
    before = os.environ.get("SNAPSTREAM_CACHE")
    os.environ["SNAPSTREAM_CACHE"] = str(cache)
    yield cache
    if before is None:
        del os.environ["SNAPSTREAM_CACHE"]
    else:
        os.environ["SNAPSTREAM_CACHE"] = before


def _needs_kivi(cmd: str) -> bool:
    """A command that runs the kivi method (by name, or +experiment=kv_quant's own sweep) in a checkout without it."""
    from snapstream_core.methods import METHODS

    return "kivi" not in METHODS and ("kivi" in cmd or ("+experiment=kv_quant" in cmd and "compression=" not in cmd))


NO_KIVI = pytest.mark.skip(reason="the kivi method is not registered in this checkout")


@pytest.mark.parametrize("doc, cmd", [
    pytest.param(doc, cmd, marks=([pytest.mark.slow] if any(s in cmd for s in SLOW) else [])
                 + ([NO_KIVI] if _needs_kivi(cmd) else []))
    for doc, cmd in CASES if not _has_placeholder(shlex.split(cmd))], ids=lambda x: x[:90])
def test_every_pasted_command_passes_its_checks(doc, cmd, tmp_path, made_by_the_docs):
    why = run_checks(cmd, tmp_path)
    key = _user_file(shlex.split(cmd))
    refused = next((k for c, k in REFUSED.items() if cmd.endswith(c)), None)
    if refused is not None:  # shown as an example of a refusal: still refused, for that reason
        assert why is not None and refused in why, f"{doc}: {cmd}\n  -> {why}"
    elif key is None:
        assert why is None, f"{doc}: {cmd}\n  -> {why}"
    else:  # composes; refused only for the user's own file, by its key
        assert why is None or key in why, f"{doc}: {cmd}\n  -> {why}"


def test_the_commands_left_out_are_only_those_with_a_placeholder():
    left = [cmd for _, cmd in CASES if _has_placeholder(shlex.split(cmd))]
    for cmd in left:
        assert _has_placeholder(shlex.split(cmd)), cmd
    assert len(left) < len(CASES) / 2  # most commands are checked as pasted


def test_a_broken_command_is_caught(tmp_path):
    assert run_checks("python -m evals.run compression=snapkvv", tmp_path)  # no such method
    assert run_checks("python -m evals.run task=needle compression.prompt_budjet=64", tmp_path)
    assert run_checks("make no-such-target", tmp_path)
    assert _commands_in("run `python -m evals.run task=aime24` then\n```bash\n.venv/bin/python -m evals.plan \\\n"
                        "    -m +experiment=paper   # comment\n```\n") == [
        "python -m evals.plan -m +experiment=paper", "python -m evals.run task=aime24"]
