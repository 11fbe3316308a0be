"""A 30-row LiveCodeBench replay (6 bundled problems x 5 samples) in which one sample per
attack kind is poisoned. The run finishes, keeps all 30 rows (every good one passes, every poisoned one gets its
own failing verdict), and re-running it resumes cleanly: nothing to redo, nothing duplicated, the same summary."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from lcb_helpers import REPO, bundled, fenced
from lcb_sample_source import REFERENCE

from evals.run import run
from tests.runner_utils import compose_cfg

CHANNEL = ("import os\ndef flood(data):\n    for fd in map(int, os.listdir('/proc/self/fd')):\n"
           "        try:\n            os.write(fd, data)\n        except OSError:\n            pass\n")

# attack kind -> (code, the outcomes it may get); every one is aimed at a stdin problem unless marked functional
ATTACKS = {
    "deep_line": (CHANNEL + "flood(b'[' * 100000 + b'\\n')\n", {"protocol_error"}),
    "bad_utf8": (CHANNEL + "flood(b'\\xff\\xfe\\n')\n", {"protocol_error"}),
    "endless_line": (CHANNEL + "c = b'a' * (1 << 20)\nfor _ in range(40):\n    flood(c)\n", {"protocol_error"}),
    "harvest_results": ("import os\nprint(sum(os.path.exists(p) for p in HARVEST))\n", {"wrong_answer"}),
    "dev_shm_and_tmp": ("for p in ('/dev/shm/x', '/tmp/x'):\n    try:\n        open(p, 'w').write('x' * 99)\n"
                        "    except OSError:\n        pass\nprint(0)\n", {"wrong_answer"}),
    "daemon": ("import os\nif os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(600)\nprint(0)\n",
               {"wrong_answer"}),
}
DEEP_VALUE = ("class Solution:\n    def __getattr__(self, name):\n        def f(*a):\n"
              "            flood(('{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"value\": ' + '[' * 995 + ']' * 995"
              " + '}\\n').encode())\n            return 0\n        return f\n")


def poisoned_replay(path: Path) -> dict[tuple[str, int], str]:
    """Write the replay file; return the attack kind of each poisoned (item_id, sample_idx)."""
    problems = bundled()
    stdin_ids = [q for q, p in problems.items() if p.kind == "stdin"]
    func_ids = [q for q, p in problems.items() if p.kind == "functional"]
    poisoned = {(stdin_ids[k % len(stdin_ids)], 1 + k // len(stdin_ids)): kind for k, kind in enumerate(ATTACKS)}
    poisoned[(func_ids[0], 4)] = "deep_value"
    lines = []
    for qid in problems:
        for idx in range(5):
            kind = poisoned.get((qid, idx))
            code = REFERENCE[qid] if kind is None else CHANNEL + DEEP_VALUE if kind == "deep_value" else \
                ATTACKS[kind][0]
            if kind == "harvest_results":  # where the rows of this run and of the project's runs are
                harvest = [str(path.parent / "run" / "samples.jsonl"), str(REPO / "results"), str(path)]
                code = f"HARVEST = {harvest!r}\n" + code
            lines.append(json.dumps({"item_id": qid, "sample_idx": idx, "completion": fenced(code)}))
    path.write_text("\n".join(lines) + "\n")
    return poisoned


def test_a_poisoned_30_row_replay_keeps_every_row_and_resumes(tmp_path):
    poisoned = poisoned_replay(tmp_path / "replay.jsonl")
    overrides = ["task=livecodebench", "task.source=bundled", "backend=replay", f"backend.path={tmp_path}/replay.jsonl",
                 f"hydra.run.dir={tmp_path}/run", f"out_root={tmp_path}", "task.timeout_s=4",
                 "task.protocol=strict"]  # the sandbox must hold without lcb_runner's guard
    out = run(compose_cfg(overrides))
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and len({(r["item_id"], r["sample_idx"]) for r in rows}) == 30
    for r in rows:
        kind = poisoned.get((r["item_id"], r["sample_idx"]))
        if kind is None:
            assert r["outcome"] == "passed", r
        else:
            allowed = {"protocol_error"} if kind == "deep_value" else ATTACKS[kind][1]
            assert r["outcome"] in allowed, (kind, r["outcome"], r.get("error"))
    summary = (out / "summary.csv").read_text()
    again = run(compose_cfg(overrides))
    assert again == out
    assert len((out / "samples.jsonl").read_text().splitlines()) == 30  # nothing redone, nothing duplicated
    assert (out / "summary.csv").read_text() == summary
    shares = pd.read_csv(out / "summary.csv").set_index(["metric", "group"])["value"]
    assert shares[("share_protocol_error", "all")] == pytest.approx(100 * 4 / 30)  # percent
