"""The planner and the runner's check import every task module they plan; a site stack may lack pandas
(``make test-compat``), so a task module imports pandas at its first use only (``tasks/lazy.py``)."""

from __future__ import annotations

import subprocess
import sys

from tests.runner_utils import ROOT

CODE = """
import sys
from tasks import TASKS, get_task
for name in sorted(TASKS):
    if name != "lm_eval":  # needs lm_eval itself
        get_task(name)
import evals.plan.__main__, evals.plan.measured
print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))
"""


def test_task_modules_and_the_planner_import_without_pandas():
    out = subprocess.run([sys.executable, "-m", "bench.without", "pandas", "-c", CODE], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_lazy_module_imports_at_first_use():
    from tasks.lazy import LazyModule

    json = LazyModule("json")
    assert json.loads("[1]") == [1]
