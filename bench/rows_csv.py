"""Write a benchmark's measurement rows (a list of dicts) as one CSV file."""

from __future__ import annotations

import csv
from pathlib import Path


def write_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` to ``path`` (UTF-8; parent folders made), one column per key in the order keys first appear; a row
    without a key leaves its cell empty. Values are written as they are (``bench.report.write_csv`` formats
    floats for the summary tables)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
