"""LongBench-v2 (Bai et al. 2024, https://github.com/THUDM/LongBench, dataset ``THUDM/LongBench-v2``) with the
official protocol of ``pred.py``/``result.py``: 503 four-choice questions over contexts of 8k to 2M words.

- :mod:`.data`: the schema, hub/path/bundled loading, the ``difficulty``/``length``/``domain`` filters;
- :mod:`.prompts`: the official templates, middle truncation to ``max_len`` tokens, the CoT second call;
- :mod:`.protocols`: what a thinking model's completion is graded on (``strict`` default, ``raw``, ``drop_empty``);
- :mod:`.grader`: the official answer extraction;
- :mod:`.summary`: the official breakdown table, plus per-domain and the compensated variant;
- :mod:`.build_sample`: how the bundled FORMAT SAMPLE (not LongBench data) was made.
"""

from tasks.longbench_v2.data import Item, load, validate
from tasks.longbench_v2.grader import extract_answer, score
from tasks.longbench_v2.prompts import PROMPT_FILES, followup, followup_bound, prompt
from tasks.longbench_v2.protocols import PROTOCOLS, answer_part, protocol_name
from tasks.longbench_v2.summary import item_terms, summarize

PRIMARY_METRIC = "accuracy"

__all__ = ["PRIMARY_METRIC", "PROMPT_FILES", "PROTOCOLS", "Item", "answer_part", "extract_answer", "followup",
           "followup_bound", "item_terms", "load", "prompt", "protocol_name", "score", "summarize", "validate"]
