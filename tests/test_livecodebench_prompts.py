"""LiveCodeBench prompts (exact lcb_runner text per model family) and code extraction on realistic outputs."""

from __future__ import annotations

import pytest
from lcb_helpers import bundled

import tasks.livecodebench as lcb
from tasks.base import Prompt
from tasks.livecodebench.prompts import extract_code
from tests.llama3_tokenizer import llama3_tokenizer_file

LLAMA = {"name": "llama31_8b_instruct", "family": "llama3", "thinking": False, "system_prompt": None}
R1 = {"name": "r1_distill_llama_8b", "family": "r1", "thinking": True, "system_prompt": None}
SMOL = {"name": "smollm2_135m", "family": "chatml", "thinking": False, "system_prompt": None}
SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")


def test_generic_style_stdin_problem_is_the_generic_template_with_system_message():
    problem = bundled()["ss_atcoder_001"]
    p = lcb.prompt(problem, LLAMA, cfg={"prompt_style": "generic"})
    assert isinstance(p, Prompt) and not p.truncated and p.stop == ()
    assert p.messages[0] == {"role": "system", "content": SYSTEM}
    assert p.messages[1]["role"] == "user"
    assert p.messages[1]["content"] == (
        f"### Question:\n{problem.question_content}\n\n"
        "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not directly "
        "test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
        "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n"
        "```python\n# YOUR CODE HERE\n```\n\n"
        "### Answer: (use the provided format with backticks)\n\n")


def test_llama3_style_functional_problem_shows_the_starter_code():
    problem = bundled()["ss_leetcode_002"]
    user = lcb.prompt(problem, SMOL, cfg=None).messages[1]["content"]
    assert user == (
        f"### Question:\n{problem.question_content}\n\n"
        "### Format: You will use the following starter code to write the solution to the problem and enclose "
        "your code within delimiters.\n"
        "```python\nclass Solution:\n    def countPairs(self, nums: List[int], k: int) -> int:\n        \n```\n\n"
        "### Answer: (use the provided format with backticks)\n\n")


def test_r1_style_is_one_plain_user_message_without_system_prompt():
    stdin, func = bundled()["ss_codeforces_001"], bundled()["ss_leetcode_001"]
    intro = ("You will be given a question (problem specification) and will generate a correct Python program that "
             "matches the specification and passes all tests.\n\n")
    p = lcb.prompt(func, R1, cfg={"prompt_style": "auto"})
    assert p.messages == [{"role": "user", "content": (
        f"{intro}Question: {func.question_content}\n\n"
        "You will use the following starter code to write the solution to the problem and enclose your code "
        "within delimiters.\n"
        "```python\nclass Solution:\n    def sortedSquares(self, nums: List[int]) -> List[int]:\n        \n```\n\n")}]
    content = lcb.prompt(stdin, R1, cfg={}).messages[0]["content"]
    assert content.startswith(f"{intro}Question: {stdin.question_content}\n\nRead the inputs from stdin solve")
    assert content.endswith("writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n")
    assert "<｜" not in content  # the model's chat template adds the turn tokens


def test_prompt_style_can_be_forced_and_model_system_prompt_replaces_lcb_one():
    problem = bundled()["ss_atcoder_001"]
    assert lcb.prompt(problem, LLAMA, cfg={"prompt_style": "r1"}).messages[0]["content"].startswith("You will be")
    assert lcb.prompt(problem, R1, cfg={"prompt_style": "generic"}).messages[0]["content"] == SYSTEM
    custom = {**LLAMA, "system_prompt": "Be brief."}
    assert lcb.prompt(problem, custom, cfg={"prompt_style": "generic"}).messages[0] == {
        "role": "system", "content": "Be brief."}
    with pytest.raises(ValueError, match="task.prompt_style"):
        lcb.prompt(problem, LLAMA, cfg={"prompt_style": "codellama"})


LLAMA_OUTPUT = """To solve this, I sort the values and take the middle.

```python
n = int(input())
a = sorted(map(int, input().split()))
print(a[n // 2])
```

This runs in O(N log N)."""

R1_ANSWER = """Using a two-pointer window over the array.

```python
# first attempt (too slow)
print(0)
```

Final solution:

```python
import sys
print(sys.stdin.read().count("1"))
```"""


@pytest.mark.parametrize("completion, expected", [
    (LLAMA_OUTPUT, "n = int(input())\na = sorted(map(int, input().split()))\nprint(a[n // 2])"),
    (R1_ANSWER, "import sys\nprint(sys.stdin.read().count(\"1\"))"),  # the last block, as lcb_runner
    ("```\nprint(1)\n```", "print(1)"),  # a bare fence works too
    ("I would print 1 with `print(1)`.", None),  # inline code is no block
    ("```python\nprint(1)", None),  # unclosed: fewer than two fence lines
    ("```python\n\n   \n```", None),  # blank block
    ("", None),
    (None, None),
])
def test_extract_code_takes_the_last_fenced_block(completion, expected):
    assert extract_code(completion) == expected


# -- lcb_runner's own renderings ---------------------------------------------------------------------------------

# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template, the tokenizer lcb_runner's format_prompt_generation
# loads for LMStyle.LLaMa3 (also vLLM's logged default for Llama-3 models).
LLAMA3_8B_INSTRUCT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def llama3_tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(llama3_tokenizer_file()), bos_token="<|begin_of_text|>")
    tok.chat_template = LLAMA3_8B_INSTRUCT_TEMPLATE
    return tok


@pytest.mark.parametrize("problem_id", ["ss_atcoder_001", "ss_leetcode_002"])
def test_llama3_style_equals_lcb_runner_rendering_token_for_token(llama3_tokenizer, problem_id):
    """lcb_runner: apply_chat_template(tokenize=False, add_generation_prompt=True) with the Llama-3-8B-Instruct
    template, then vLLM tokenises that text (special tokens added); ours: the raw-text Prompt, tokenised as
    evals/execute/backends/hf.py does (add_special_tokens=True)."""
    problem = bundled()[problem_id]
    generic = lcb.prompt(problem, LLAMA, cfg={"prompt_style": "generic"}).messages  # lcb_runner's two messages
    official_text = llama3_tokenizer.apply_chat_template(generic, tokenize=False, add_generation_prompt=True)
    official_ids = llama3_tokenizer(official_text)["input_ids"]
    ours = lcb.prompt(problem, LLAMA, cfg={"prompt_style": "auto"})
    assert isinstance(ours.messages, str) and ours.messages == official_text
    assert llama3_tokenizer(ours.messages, add_special_tokens=True)["input_ids"] == official_ids
    assert "Cutting Knowledge Date" not in ours.messages  # not the 3.1 template
    assert ours.messages.endswith("(use the provided format with backticks)<|eot_id|>"
                                  "<|start_header_id|>assistant<|end_header_id|>\n\n")  # content trimmed
    assert ours.stop == ("###",)  # lcb_runner --stop "###"


def test_r1_lcb_style_is_lcb_runners_hand_written_prompt():
    problem = bundled()["ss_codeforces_001"]
    raw = lcb.prompt(problem, R1, cfg={"prompt_style": "r1_lcb"}).messages
    plain = lcb.prompt(problem, R1, cfg={"prompt_style": "r1"}).messages[0]["content"]
    assert isinstance(raw, str)
    assert raw.startswith("<\uff5cbegin\u2581of\u2581sentence\uff5c>A conversation between User")
    assert raw.endswith("<\uff5cUser\uff5c>" + plain + "<\uff5cAssistant\uff5c>")


def test_auto_style_by_family():
    problem = bundled()["ss_atcoder_001"]
    assert isinstance(lcb.prompt(problem, LLAMA, cfg={}).messages, str)  # llama3: lcb_runner's rendering
    assert lcb.prompt(problem, SMOL, cfg={}).messages[0] == {"role": "system", "content": SYSTEM}  # generic
    assert lcb.prompt(problem, R1, cfg={}).messages[0]["role"] == "user"  # r1
