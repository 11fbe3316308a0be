"""The official LiveCodeBench prompts (``lcb_runner/prompts/code_generation.py``) and code extraction.

Styles (``task.prompt_style``; ``auto`` picks by ``model.family``: ``llama3`` → ``llama3``, ``r1`` → ``r1``, any
other → ``generic``):

* ``llama3`` (``LMStyle.LLaMa3``, ``format_prompt_generation``): the generic system message and question template,
  rendered as lcb_runner renders them, with the **Meta-Llama-3-8B-Instruct** chat template (no "Cutting Knowledge
  Date" system lines; contents trimmed), whatever the model's own template; generation stops at ``"###"``
  (``runner/parser.py``: ``--stop "###"``, passed to vLLM's ``SamplingParams(stop=...)``, which cuts the text before
  it). The rendered text is tokenised with the tokenizer's special tokens as vLLM does with a text prompt (a
  Llama-3 tokenizer then adds its ``<|begin_of_text|>`` before the template's own, as in lcb_runner's runs).
* ``generic``: the same two messages through the model's own chat template (no stop string).
* ``r1`` (default for R1 models; lighteval's/open-r1's form): ``get_deepseek_r1_question_template_answer``'s
  text without its hand-written tokens, as one user message through the model's chat template, no system prompt.
* ``r1_lcb`` (lcb_runner's own ``LMStyle.DeepSeekR1``): a raw text prompt, the hand-written
  ``<｜begin▁of▁sentence｜>`` + R1-Zero preamble (``PromptConstants.SYSTEM_MESSAGE_DEEPSEEK_R1``) + the question
  template ending ``<｜Assistant｜>``, no chat template.

Extraction (``utils/extraction_utils.py``): the lines between the last two lines that contain a triple backtick.
"""

from __future__ import annotations

from typing import Any

from tasks.base import Prompt
from tasks.livecodebench.problem import Problem

SYSTEM_MESSAGE = ("You are an expert Python programmer. You will be given a question (problem specification) and "
                  "will generate a correct Python program that matches the specification and passes all tests.")
FORMAT_WITH_STARTER = ("You will use the following starter code to write the solution to the problem and enclose "
                       "your code within delimiters.")
FORMAT_STDIN = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
                "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")
R1_INTRO = ("You will be given a question (problem specification) and will generate a correct Python program that "
            "matches the specification and passes all tests.\n\n")
R1_ZERO_PREAMBLE = (
    "<｜begin▁of▁sentence｜>A conversation between User and Assistant. "
    "The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.<｜User｜>"
)
STYLES = ("auto", "llama3", "generic", "r1", "r1_lcb")
LLAMA3_STOP = ("###",)  # lcb_runner/runner/parser.py: --stop default "###"
FENCE = "```"


def _code_block(problem: Problem) -> str:
    body = problem.starter_code if problem.starter_code else "# YOUR CODE HERE"
    return f"```python\n{body}\n```\n\n"


def generic_user_message(problem: Problem) -> str:
    """``get_generic_question_template_answer``: the user turn of the LLaMa3 (and OpenAI chat) style."""
    fmt = FORMAT_WITH_STARTER if problem.starter_code else FORMAT_STDIN
    return (f"### Question:\n{problem.question_content}\n\n### Format: {fmt}\n{_code_block(problem)}"
            "### Answer: (use the provided format with backticks)\n\n")


def r1_user_message(problem: Problem) -> str:
    """``get_deepseek_r1_question_template_answer`` without the hand-written special tokens."""
    fmt = FORMAT_WITH_STARTER if problem.starter_code else FORMAT_STDIN
    return f"{R1_INTRO}Question: {problem.question_content}\n\n{fmt}\n{_code_block(problem)}"


def resolve_style(style: str, family: str | None) -> str:
    if style not in STYLES:
        raise ValueError(f"task.prompt_style: expected one of {', '.join(STYLES)}, got {style!r}")
    if style == "auto":
        return {"r1": "r1", "llama3": "llama3"}.get(str(family), "generic")
    return style


def render_llama3_instruct(messages: list[dict[str, str]]) -> str:
    """Meta-Llama-3-8B-Instruct's chat template (the tokenizer lcb_runner loads for ``LMStyle.LLaMa3``), written out:
    ``<|begin_of_text|>``, then per message ``<|start_header_id|>ROLE<|end_header_id|>\\n\\n`` + the content
    trimmed (Jinja ``| trim``) + ``<|eot_id|>``, then the assistant header (``add_generation_prompt=True``)."""
    turns = "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                    for m in messages)
    return f"<|begin_of_text|>{turns}<|start_header_id|>assistant<|end_header_id|>\n\n"


def build_prompt(problem: Problem, style: str, family: str | None, system_prompt: str | None = None) -> Prompt:
    """The prompt for ``problem`` in ``style`` (see the module docstring). A model's own ``system_prompt`` replaces
    LiveCodeBench's system message (llama3, generic) or is added as one (r1); ``r1_lcb`` is lcb_runner's fixed
    text. LiveCodeBench prompts are short, so nothing is ever truncated."""
    resolved = resolve_style(style, family)
    if resolved == "r1_lcb":
        return Prompt(messages=R1_ZERO_PREAMBLE + r1_user_message(problem) + "<｜Assistant｜>", truncated=False)
    if resolved == "r1":
        messages = [{"role": "user", "content": r1_user_message(problem)}]
        if system_prompt:
            messages.insert(0, {"role": "system", "content": system_prompt})
        return Prompt(messages=messages, truncated=False)
    messages = [{"role": "system", "content": system_prompt or SYSTEM_MESSAGE},
                {"role": "user", "content": generic_user_message(problem)}]
    if resolved == "llama3":
        return Prompt(messages=render_llama3_instruct(messages), truncated=False, stop=LLAMA3_STOP)
    return Prompt(messages=messages, truncated=False)


def extract_code(completion: Any) -> str | None:
    """The code between the last two lines holding a triple backtick; None when there is no such block or it is
    blank (lcb_runner returns "" then, which always fails)."""
    if not isinstance(completion, str):
        return None
    lines = completion.split("\n")
    fences = [i for i, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return None
    code = "\n".join(lines[fences[-2] + 1: fences[-1]])
    return code if code.strip() else None
