"""Every file a task and its model's tokenizer open while the task loads its items and builds and encodes its prompts
(the CoT answer call included), recorded with Python's audit hook (``open`` events), printed as JSON
``{label: [real paths]}``. Run in its own process (an audit hook cannot be removed):
``python -m tests.prompt_reads LABEL OVERRIDE... [-- LABEL OVERRIDE...]``."""

from __future__ import annotations

import json
import os
import sys

from tests.runner_utils import compose_cfg

OPENED: set[str] = set()
RECORDING = [False]


def _audit(event: str, args: tuple) -> None:
    if RECORDING[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        OPENED.add(os.path.realpath(os.fsdecode(args[0])))


def reads(overrides: list[str]) -> list[str]:
    """The files opened while the run of ``overrides`` loads its items and builds, encodes and follows up on every
    prompt (no weights)."""
    from evals.config.encode import encode_prompt
    from evals.config.models import load_tokenizer
    from evals.config.spec import check
    from tasks.base import Prompt
    from tasks.protocol import hook

    spec = check(compose_cfg(overrides))
    OPENED.clear()
    RECORDING[0] = True
    try:
        items = spec.task_module.load(spec.task)
        tokenizer = load_tokenizer(spec.model)
        followup = hook(spec.task_module, "followup")
        for item in items:
            prompt = spec.task_module.prompt(item, spec.model, cfg=spec.task, tokenizer=tokenizer)
            encode_prompt(tokenizer, spec.model, prompt if isinstance(prompt, Prompt) else Prompt(prompt))
            if followup is not None and (second := followup(item, "Step by step.", spec.model, cfg=spec.task,
                                                            tokenizer=tokenizer)) is not None:
                encode_prompt(tokenizer, spec.model, second[0])
    finally:
        RECORDING[0] = False
    return sorted(OPENED)


def main(argv: list[str]) -> None:
    sys.addaudithook(_audit)
    runs, current = [], []
    for arg in [*argv, "--"]:
        if arg == "--":
            if current:
                runs.append(current)
            current = []
        else:
            current.append(arg)
    print(json.dumps({label: reads(overrides) for label, *overrides in runs}))


if __name__ == "__main__":
    main(sys.argv[1:])
