"""LongBench-v2 with a thinking model, against THUDM/LongBench ``pred.py`` + ``result.py`` run unmodified on 80
replayed R1 completions (``tests/data/longbench_v2_r1_battery.json``, see its ``about``):

- ``task.protocol=raw``: every row's letter equals ``pred.py``'s on the whole served text, and the accuracy equals
  ``result.py``'s table;
- ``strict`` (default): every row's letter equals ``pred.py``'s on the content a reasoning parser serves (the text after
  ``</think>``); where ``pred.py`` crashes (content None: the thinking never finished) the row is unanswered and wrong,
  never dropped; the accuracy equals ``result.py`` over all rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tasks.longbench_v2 import answer_part, score, summarize
from tasks.longbench_v2.data import Item

BATTERY = json.loads((Path(__file__).parent / "data" / "longbench_v2_r1_battery.json").read_text(encoding="utf-8"))
ROWS = BATTERY["rows"]
TABLE = {"Overall": "all", "Easy": "difficulty=easy", "Hard": "difficulty=hard", "Short": "length=short",
         "Medium": "length=medium", "Long": "length=long"}


def item(row: dict) -> Item:
    return Item(item_id=row["item_id"], domain=row["domain"], sub_domain="s", difficulty=row["difficulty"],
                length=row["length"], question="q", choices=("a", "b", "c", "d"), answer=row["answer"], context="")


def graded(protocol: str) -> pd.DataFrame:
    cfg = {"protocol": protocol}
    out = []
    for row in ROWS:
        text, closed = answer_part(row["completion"], True, cfg=cfg)
        it = item(row)
        out.append({"item_id": it.item_id, "sample_idx": 0, **it.breakdown, **score(it, text, cfg=cfg),
                    "thinking_closed": closed, "case": row["case"]})
    return pd.DataFrame(out)


def test_battery_covers_unfinished_thinking_and_crashes():
    cases = {r["case"] for r in ROWS}
    assert len(ROWS) >= 80 and any("unfinished" in c for c in cases)
    assert any(r["official_parser"].startswith("crash") for r in ROWS)
    assert any(r["official_raw_pred"] is None for r in ROWS)


@pytest.mark.parametrize("protocol,pred_key,table", [("raw", "official_raw_pred", "raw"),
                                                     ("strict", "official_parser_pred", "parser_all_rows")])
def test_every_row_and_the_table_equal_pred_and_result(protocol, pred_key, table):
    rows = graded(protocol)
    assert [None if pd.isna(p) else p for p in rows["prediction"]] == [r[pred_key] for r in ROWS]
    summary = summarize(rows).set_index(["metric", "group"])
    for column, group in TABLE.items():
        assert round(summary.loc[("accuracy", group), "value"], 1) == BATTERY["result_py"][table][column]
    assert summary.loc[("accuracy", "all"), "n"] == len(ROWS)  # every row in the denominator


def test_drop_empty_is_the_old_biased_reading():
    """drop_empty leaves out the rows whose answer part is empty: fewer items, a higher accuracy than result.py's."""
    summary = summarize(graded("drop_empty")).set_index(["metric", "group"])
    assert summary.loc[("accuracy", "all"), "n"] < len(ROWS)
    assert summary.loc[("accuracy", "all"), "value"] > BATTERY["result_py"]["parser_all_rows"]["Overall"]
